#!/usr/bin/env bash
# prepare-rdma.sh OUT — what the RoCE boot test's image carries beyond the
# usual one (make rdma-test):
#   - rdma-core's libibverbs and its soft-RoCE provider (Debian's
#     libibverbs-dev and ibverbs-providers), installed on this host when
#     missing;
#   - OUT/dpu-agent: dpu-agent built with cgo and -tags rdma;
#   - OUT/files: one mkuimage "-files HOST:GUEST" argument per line: that
#     agent as /usr/bin/dpu-agent (ahead of /bbin on u-root's PATH), the
#     shared libraries it and the rxe provider load, the provider and its
#     driver file.
set -euo pipefail

out=${1:?usage: prepare-rdma.sh OUT}
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! [ -f /usr/include/infiniband/verbs.h ] || ! [ -f /etc/libibverbs.d/rxe.driver ]; then
	echo "prepare-rdma: installing libibverbs-dev ibverbs-providers"
	as_root apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
	as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
		--no-install-recommends libibverbs-dev ibverbs-providers >/dev/null
fi

mkdir -p "$out"
CGO_ENABLED=1 GOOS=linux GOARCH=amd64 go build -tags rdma -o "$out/dpu-agent" ./cmd/dpu-agent

multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
provider=/usr/lib/$multiarch/libibverbs/librxe-rdmav34.so
[ -f "$provider" ] || provider=$(ls /usr/lib/"$multiarch"/libibverbs/librxe-rdmav*.so | head -n1)

{
	echo "$out/dpu-agent:usr/bin/dpu-agent"
	echo "$provider:${provider#/}"
	echo "/etc/libibverbs.d/rxe.driver:etc/libibverbs.d/rxe.driver"
	# the loader where the binary names it, every library the agent and
	# the provider load under its soname in /usr/local/lib (u-root's
	# LD_LIBRARY_PATH; the image has no ld.so.cache)
	for bin in "$out/dpu-agent" "$provider"; do
		ldd "$bin" | awk '$1 ~ /^\// { print "loader", $1 } $2 == "=>" && $3 ~ /^\// { print "lib", $3 }'
	done | sort -u | while read -r what lib; do
		if [ "$what" = loader ]; then
			echo "$(readlink -f "$lib"):${lib#/}"
		else
			echo "$(readlink -f "$lib"):usr/local/lib/$(basename "$lib")"
		fi
	done
} >"$out/files"
echo "prepare-rdma: $(wc -l <"$out/files") files for the image in $out/files"
