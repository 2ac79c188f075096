#!/bin/sh
# tools/demo/openai/install.sh DIR — install the pinned official `openai`
# npm client (package.json, package-lock.json beside this script) into
# DIR/node_modules with `npm ci`, unless DIR already holds exactly that
# lock.  Run by `make demo`, `make serve` and tests/e2e/openai.bats; once
# installed, nothing here touches the network again.  Needs node and npm.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: install.sh DIR}
command -v node >/dev/null 2>&1 || { echo "install.sh: needs node" >&2; exit 69; }
command -v npm >/dev/null 2>&1 || { echo "install.sh: needs npm" >&2; exit 69; }
mkdir -p "$dir"
if [ -f "$dir/node_modules/openai/package.json" ] &&
    cmp -s "$here/package-lock.json" "$dir/package-lock.json"; then
	exit 0
fi
cp "$here/package.json" "$here/package-lock.json" "$here/.npmrc" "$dir/"
cd "$dir"
if ! npm ci --prefer-offline --no-audit --no-fund --loglevel=error \
    >npm-ci.log 2>&1; then
	cat npm-ci.log >&2
	echo "install.sh: npm ci failed in $dir" >&2
	exit 69
fi
