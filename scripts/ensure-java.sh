#!/usr/bin/env bash
# Spark needs a Java 17+ runtime. Install it from Debian's packages when we can, else say how.
set -euo pipefail
if command -v java >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Java not found: installing openjdk-17-jre-headless from Debian's packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  exit 0
fi
echo "Spark needs Java 17 or newer, and 'java' is not on PATH." >&2
echo "Install it, e.g.: sudo apt-get install openjdk-17-jre-headless  (or brew install openjdk@17)" >&2
exit 1
