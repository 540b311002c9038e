#!/usr/bin/env bash
# The service harness builds and runs servers from package registries. It needs a JDK (javac
# compiles the HDFS launcher), Maven (Kafka, HDFS and Spark jars from Maven Central) and Go
# (MinIO is built from its Go module). Install what is missing from Debian's packages when we
# can (root + apt), else say how.
set -euo pipefail
missing=()
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v go >/dev/null 2>&1 || missing+=(golang-go)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} from Debian's packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  exit 0
fi
echo "The service harness needs: ${missing[*]} (a JDK 17+, Maven, Go 1.21+)." >&2
echo "Install them, e.g.: sudo apt-get install ${missing[*]}  (or brew install openjdk@17 maven go)" >&2
exit 1
