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

# gpucloud_need_static_busybox makes sure /bin/busybox is a statically
# linked program (an ELF file without a program interpreter), installing
# busybox-static over Debian's dynamic busybox when it is not: the base
# image runs it in containers that hold no shared libraries.
gpucloud_need_static_busybox() {
	gpucloud_need_tool readelf binutils || return 1
	if [ -f /bin/busybox ] && ! readelf -l /bin/busybox 2>/dev/null | grep -q 'program interpreter'; then
		return 0
	fi
	if [ "$(id -u)" != 0 ]; then
		echo "tools.sh: /bin/busybox is missing or not statically linked, and installing busybox-static needs root" >&2
		return 1
	fi
	echo "tools.sh: installing busybox-static from Debian's packages (/bin/busybox is missing or dynamic)"
	apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends busybox-static >/dev/null || return 1
	[ -f /bin/busybox ] && ! readelf -l /bin/busybox | grep -q 'program interpreter'
}

gpucloud_need_tool promtool prometheus
# The NVML bindings (agent/gpu/nvml) are cgo. Without a C compiler Go turns
# cgo off, silently, and the package's tests vanish ([no test files]): a C
# compiler is a tool like the others (.ci/run then fails if cgo is off).
if ! command -v "$(go env CC)" >/dev/null 2>&1; then
	gpucloud_need_tool gcc gcc
fi
# Chromium (Debian's chromium package) runs the web console's browser tests
# (e2e/console_test.go); they fail in CI without it.
gpucloud_need_tool chromium chromium
# The container runtime's tests (agent/runtime/containerd) start a private
# containerd with runc, run tini-static as each container's init, and build
# their images from busybox-static; they fail in CI without them.
# The tests find these programs as this check does: by name in PATH
# (containerd also finds its shim and runc there), and busybox at the
# path Debian's busybox-static gives it, which the base image is made
# from (containerd.DefaultBusybox), statically linked.
gpucloud_need_tool containerd containerd
gpucloud_need_tool containerd-shim-runc-v2 containerd
gpucloud_need_tool runc runc
gpucloud_need_tool tini-static tini
gpucloud_need_tool busybox busybox-static
gpucloud_need_static_busybox
# The instance network's tests (agent/network, and agent/runtime/containerd's
# network test) make bridges, veths and namespaces with ip(8) and rules with
# nft(8); they fail in CI without them.
gpucloud_need_tool ip iproute2
gpucloud_need_tool nft nftables
# The SSH end-to-end test (cmd/gpucloud/ssh_test.go) runs OpenSSH's ssh,
# scp, ssh-keygen and rsync against instances; it fails in CI without them.
gpucloud_need_tool ssh openssh-client
gpucloud_need_tool ssh-keygen openssh-client
gpucloud_need_tool scp openssh-client
gpucloud_need_tool rsync rsync
# Shared volumes on XFS keep their sizes with project quotas
# (agent/sharedvol.go): their tests make an XFS filesystem and set quotas.
gpucloud_need_tool mkfs.xfs xfsprogs
gpucloud_need_tool xfs_quota xfsprogs
# The OpenAPI document is linted by a third-party linter, Redocly CLI with
# its recommended rules (httpapi TestOpenAPILint), installed from npm at a
# pinned version into the user's cache (not the checkout) and put on PATH.
# 1.34.7 runs on Debian 12's Node.js 18; the 2.x line needs Node 20.19.
gpucloud_need_redocly() {
	local version=1.34.7
	local dir="${XDG_CACHE_HOME:-$HOME/.cache}/gpucloud/redocly-$version"
	if [ ! -x "$dir/node_modules/.bin/redocly" ]; then
		gpucloud_need_tool node nodejs || return 1
		gpucloud_need_tool npm npm || return 1
		echo "tools.sh: installing @redocly/cli@$version from npm into $dir (for redocly)"
		mkdir -p "$dir" &&
			npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@redocly/cli@$version" >/dev/null || return 1
	fi
	export PATH="$dir/node_modules/.bin:$PATH"
}
gpucloud_need_redocly
# The Terraform provider's acceptance tests (terraform/provider) run real
# terraform, or OpenTofu where terraform is missing: tofu is built from its
# Go module at a pinned version into the user's Go bin and put on PATH.
# With $CI set they fail when neither is there.
gpucloud_need_tofu() {
	if command -v terraform >/dev/null 2>&1 || command -v tofu >/dev/null 2>&1; then
		return 0
	fi
	local bin
	bin="$(go env GOPATH)/bin"
	if [ ! -x "$bin/tofu" ]; then
		# Not `go install ...@v1.10.6`: OpenTofu's go.mod has a replace
		# directive, which go install refuses ("must not contain
		# directives that would cause it to be interpreted differently");
		# so the module is downloaded (through the module proxy) and
		# built from its own directory, where the replace applies.
		echo "tools.sh: building OpenTofu v1.10.6 from its Go module (for terraform/provider's acceptance tests; a few minutes)"
		local src
		src="$(go mod download -json github.com/opentofu/opentofu@v1.10.6 | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')" || return 1
		[ -n "$src" ] || return 1
		(cd "$src" && GOFLAGS=-mod=mod go build -o "$bin/tofu" ./cmd/tofu) || return 1
	fi
	export PATH="$PATH:$bin"
}
gpucloud_need_tofu
