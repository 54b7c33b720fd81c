#!/usr/bin/env bash
# prepare-vmtest.sh CACHE MODULE... — what images/vmtest needs on this host:
#   - qemu-system-aarch64 (Debian's qemu-system-arm), installed when missing;
#   - a Debian arm64 kernel: CACHE/vmlinuz and CACHE/release, fetched with
#     apt-get download (adding the arm64 architecture to dpkg if needed);
#   - with VMTEST_ARCH=amd64: qemu-system-x86_64 and an amd64 kernel instead;
#   - CACHE/stage: the named modules and their dependencies for that kernel,
#     staged by images/cmd/modstage for the image to carry.
# The cache is kept (it is git-ignored); delete it to fetch a newer kernel.
set -euo pipefail

cache=${1:?usage: prepare-vmtest.sh CACHE MODULE...}
shift
modules=("$@")
arch=${VMTEST_ARCH:-arm64}
case $arch in
arm64) qemu=qemu-system-aarch64 qemu_pkg=qemu-system-arm ;;
amd64) qemu=qemu-system-x86_64 qemu_pkg=qemu-system-x86 ;;
*) echo "prepare-vmtest: VMTEST_ARCH $arch: want arm64 or amd64" >&2; exit 2 ;;
esac
[ ${#modules[@]} -gt 0 ] || { echo "prepare-vmtest: no modules named" >&2; exit 2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=
# apt_update refreshes the package lists once, waiting for a concurrent apt
# and trying again after a failed fetch (a mirror's hiccup).
apt_update() {
	[ -n "$apt_updated" ] && return 0
	local try
	for try in 1 2 3; do
		as_root apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null && break
		[ "$try" = 3 ] && return 1
		echo "prepare-vmtest: apt-get update failed, again in 10 s" >&2
		sleep 10
	done
	apt_updated=1
}

if ! command -v $qemu >/dev/null; then
	echo "prepare-vmtest: installing $qemu_pkg"
	apt_update
	# An install that fails (a fetch, a dpkg trigger) is tried again, up to
	# three times in all, with apt's last lines shown.
	for try in 1 2 3; do
		if out=$(as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $qemu_pkg 2>&1); then
			break
		fi
		echo "$out" | tail -n 5 >&2
		[ "$try" = 3 ] && exit 1
		echo "prepare-vmtest: installing $qemu_pkg failed, again in 10 s" >&2
		sleep 10
	done
fi

stage_ok() {
	[ -s "$cache/vmlinuz" ] && [ -s "$cache/release" ] && [ -f "$cache/stage/.modules" ] &&
		[ "$(cat "$cache/stage/.modules")" = "${modules[*]}" ]
}
if stage_ok; then
	echo "prepare-vmtest: kernel $(cat "$cache/release") cached in $cache"
	exit 0
fi

if [ "$(dpkg --print-architecture)" != "$arch" ] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
	as_root dpkg --add-architecture "$arch"
	apt_updated= # the lists fetched before know nothing of the new architecture
	apt_update
fi
# linux-image-ARCH is the meta package; it depends on the versioned one.
# (Nothing, not a failure, while the lists do not know the architecture.)
kernel_pkg() {
	{ apt-cache depends "linux-image-$arch:$arch" 2>/dev/null || true; } |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}
pkg=$(kernel_pkg)
if [ -z "$pkg" ]; then
	apt_updated=
	apt_update
	pkg=$(kernel_pkg)
fi
[ -n "$pkg" ] || { echo "prepare-vmtest: no Debian $arch kernel package found" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp" # apt's download user must be able to write there
echo "prepare-vmtest: downloading $pkg"
(cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
	(cd "$tmp" && apt-get download "$pkg")
dpkg-deb -x "$tmp"/*.deb "$tmp/root"

modroot=$(dirname "$(find "$tmp/root" -name modules.order -path '*/modules/*' | head -n1)")
release=$(basename "$modroot")
vmlinuz="$tmp/root/boot/vmlinuz-$release"
[ -f "$vmlinuz" ] || { echo "prepare-vmtest: $pkg has no /boot/vmlinuz-$release" >&2; exit 1; }

mkdir -p "$cache"
rm -rf "$cache/stage" "$cache/stage.tmp"
go run ./images/cmd/modstage -tree "$modroot" -o "$cache/stage.tmp" "${modules[@]}"
echo "${modules[*]}" >"$cache/stage.tmp/.modules"
cp "$vmlinuz" "$cache/vmlinuz"
echo "$release" >"$cache/release"
mv "$cache/stage.tmp" "$cache/stage"
echo "prepare-vmtest: kernel $release and its modules cached in $cache"
