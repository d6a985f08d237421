# Starts a throwaway PostgreSQL server for the store/postgres tests and
# exports GPUCLOUD_TEST_POSTGRES_URL. Source it (`. .ci/postgres.sh`) from
# bash, before `go test ./...`; the server stops and its files are removed
# when the sourcing shell exits.
#
# It is idempotent: when GPUCLOUD_TEST_POSTGRES_URL is already set (by the
# developer, or by an earlier source in the same shell) it does nothing. It
# installs PostgreSQL from Debian's packages when the server binaries are
# missing, because a fresh CI machine has only what the project installs.
# GPUCLOUD_SKIP_POSTGRES=1 skips it all (the PostgreSQL tests then skip).
#
# The cluster is for tests only: it listens on 127.0.0.1 and a unix socket
# in its own temporary directory, trusts local connections, and runs with
# fsync off, which is unsafe for data that matters and fine for data that is
# deleted an instant later.

gpucloud_pg_bindir() {
	local d
	if command -v pg_config >/dev/null 2>&1; then
		d=$(pg_config --bindir 2>/dev/null)
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	fi
	# Debian keeps the server binaries out of PATH, one directory per major
	# version; take the newest.
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

# gpucloud_pg_as_owner runs a command as the cluster's owner: initdb and
# postgres refuse to run as root, so root runs them as the postgres user.
gpucloud_pg_as_owner() {
	if [ "$(id -u)" = 0 ]; then
		if command -v runuser >/dev/null 2>&1; then
			runuser -u postgres -- "$@"
		else
			su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
		fi
	else
		"$@"
	fi
}

gpucloud_pg_stop() {
	if [ -n "${GPUCLOUD_PG_DIR:-}" ] && [ -d "$GPUCLOUD_PG_DIR" ]; then
		gpucloud_pg_as_owner "$GPUCLOUD_PG_BIN/pg_ctl" -D "$GPUCLOUD_PG_DIR/data" -m immediate -w stop \
			>/dev/null 2>&1 || true
		rm -rf "$GPUCLOUD_PG_DIR"
	fi
	GPUCLOUD_PG_DIR=
}

# gpucloud_pg_port_free reports whether nothing listens on 127.0.0.1:$1.
gpucloud_pg_port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

gpucloud_pg_setup() {
	if [ "${GPUCLOUD_SKIP_POSTGRES:-}" = 1 ]; then
		echo "postgres.sh: GPUCLOUD_SKIP_POSTGRES=1: PostgreSQL tests will be skipped"
		return 0
	fi
	if [ -n "${GPUCLOUD_TEST_POSTGRES_URL:-}" ]; then
		echo "postgres.sh: using the given GPUCLOUD_TEST_POSTGRES_URL"
		return 0
	fi

	GPUCLOUD_PG_BIN=$(gpucloud_pg_bindir) || {
		if [ "$(id -u)" != 0 ]; then
			echo "postgres.sh: PostgreSQL is not installed and installing it needs root" >&2
			return 1
		fi
		echo "postgres.sh: installing PostgreSQL from Debian's packages"
		apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null || return 1
		GPUCLOUD_PG_BIN=$(gpucloud_pg_bindir) || {
			echo "postgres.sh: no initdb after installing postgresql" >&2
			return 1
		}
	}
	if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
		echo "postgres.sh: running as root, but there is no postgres user to own the cluster" >&2
		return 1
	fi

	GPUCLOUD_PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpucloud-pg.XXXXXX") || return 1
	# The directory must be the owner's: the server writes its data, log
	# and socket there.
	if [ "$(id -u)" = 0 ]; then
		chown postgres: "$GPUCLOUD_PG_DIR" || return 1
	fi
	trap gpucloud_pg_stop EXIT

	# The default collation is a linguistic one (ICU en-US, where "a" sorts
	# before "B"), as on most production servers, so that the tests catch a
	# query whose order depends on it; byte order (C.UTF-8) is the fallback
	# for servers built without ICU.
	if ! gpucloud_pg_as_owner "$GPUCLOUD_PG_BIN/initdb" -D "$GPUCLOUD_PG_DIR/data" -U postgres \
		--auth=trust --encoding=UTF8 --locale=C.UTF-8 --locale-provider=icu --icu-locale=en-US \
		>"$GPUCLOUD_PG_DIR/initdb.log" 2>&1; then
		rm -rf "$GPUCLOUD_PG_DIR/data"
		if ! gpucloud_pg_as_owner "$GPUCLOUD_PG_BIN/initdb" -D "$GPUCLOUD_PG_DIR/data" -U postgres \
			--auth=trust --encoding=UTF8 --locale=C.UTF-8 >>"$GPUCLOUD_PG_DIR/initdb.log" 2>&1; then
			cat "$GPUCLOUD_PG_DIR/initdb.log" >&2
			return 1
		fi
	fi

	# Try ports from 55432 on: another cluster (or another CI run) may hold
	# one, and a port can be taken between the check and the start.
	local port started=
	for port in $(seq 55432 55482); do
		gpucloud_pg_port_free "$port" || continue
		if gpucloud_pg_as_owner "$GPUCLOUD_PG_BIN/pg_ctl" -D "$GPUCLOUD_PG_DIR/data" -w -t 60 \
			-l "$GPUCLOUD_PG_DIR/server.log" \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $GPUCLOUD_PG_DIR -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
			start >/dev/null 2>&1; then
			started=$port
			break
		fi
	done
	if [ -z "$started" ]; then
		echo "postgres.sh: the server did not start; its log:" >&2
		cat "$GPUCLOUD_PG_DIR/server.log" >&2 2>/dev/null
		return 1
	fi
	"$GPUCLOUD_PG_BIN/createdb" -h 127.0.0.1 -p "$started" -U postgres gpucloud_test || return 1

	export GPUCLOUD_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$started/gpucloud_test?sslmode=disable"
	echo "postgres.sh: PostgreSQL $("$GPUCLOUD_PG_BIN/postgres" -V | awk '{print $3}') on 127.0.0.1:$started" \
		"(data in $GPUCLOUD_PG_DIR, removed on exit)"
}

gpucloud_pg_setup
