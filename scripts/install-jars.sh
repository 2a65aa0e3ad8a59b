#!/usr/bin/env bash
# Copies the jars of each descriptor jvm/NAME/pom.xml (with their dependencies) into .jars/NAME/.
# Idempotent: a folder is refreshed only when its pom.xml is newer than its stamp; Maven caches in ~/.m2.
set -euo pipefail
cd "$(dirname "$0")/.."
plugin=org.apache.maven.plugins:maven-dependency-plugin:3.8.1
for pom in jvm/*/pom.xml; do
  name=$(basename "$(dirname "$pom")")
  out=.jars/$name
  if [ -f "$out/.stamp" ] && [ "$out/.stamp" -nt "$pom" ]; then continue; fi
  echo "resolving jars for $name ($pom)"
  rm -rf "$out"
  mvn -B -q -f "$pom" "$plugin:copy-dependencies" -DoutputDirectory="$PWD/$out" -DincludeScope=runtime
  touch "$out/.stamp"
done
