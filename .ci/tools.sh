# Sourced by .ci/run: installs what the tests need besides Go and
# PostgreSQL from Debian's packages when it is missing. promtool (Debian's
# prometheus package) checks every metrics exposition the tests produce.
gpucloud_need_tool() { # TOOL PACKAGE
	if command -v "$1" >/dev/null 2>&1; then
		return 0
	fi
	if [ "$(id -u)" != 0 ]; then
		echo "tools.sh: $1 is missing and installing $2 needs root" >&2
		return 1
	fi
	echo "tools.sh: installing $2 from Debian's packages (for $1)"
	apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null || return 1
	command -v "$1" >/dev/null 2>&1
}

gpucloud_need_tool promtool prometheus
# Chromium (Debian's chromium package) runs the web console's browser tests
# (e2e/console_test.go); they fail in CI without it.
gpucloud_need_tool chromium chromium
# The container runtime's tests (agent/runtime/containerd) start a private
# containerd with runc, run tini-static as each container's init, and build
# their images from busybox-static; they fail in CI without them.
gpucloud_need_tool containerd containerd
gpucloud_need_tool runc runc
gpucloud_need_tool tini-static tini
gpucloud_need_tool busybox busybox-static
# The instance network's tests (agent/network, and agent/runtime/containerd's
# network test) make bridges, veths and namespaces with ip(8) and rules with
# nft(8); they fail in CI without them.
gpucloud_need_tool ip iproute2
gpucloud_need_tool nft nftables
