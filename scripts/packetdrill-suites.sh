#!/bin/bash
# Run packetdrill's TCP suites (gtests/net/tcp/<suite>/*.pkt) against the
# kernel, or with --so against a shared object implementing packetdrill.h,
# and write one JSON line per script (suite, script, verdict, first error).
# Each script runs once per address family, as packetdrill's run_all.py does
# (ipv4, ipv4-mapped-ipv6, ipv6; *v4.pkt skip ipv6, *v6.pkt skip the v4
# ones), with the same addresses and -D defines; a script passes when every
# family passes. Each run is in a fresh network and mount namespace (`unshare
# --net --mount`, lo up, private tmpfs on /tmp), so the scripts' sysctls and
# /tmp files never reach the host, under a timeout. Root only.
#
#   scripts/packetdrill-suites.sh [--so PATH [--so-flags STR]] [--out FILE]
#       [--suites "a b"] [--packetdrill BIN] [--scripts DIR] [--timeout SECS]
#       [--retries N] [--families "ipv4 ipv4-mapped-ipv6 ipv6"]
#       [--route-cc NAME] [--logs DIR] [-v]
#
# Defaults: the 18 suites blocking ... gro, packetdrill and scripts under
# target/packetdrill-src/net/{packetdrill,tcp}, timeout 60 s, all 3 families.
#
# A failed run is retried up to --retries times (default 2; not after a
# timeout or a crash): the kernel's timings miss by a few ms now and then on
# this VM. The JSON records each family's tries; a pass on a retry is shown.
# With --so, packetdrill gets --so_flags=STR (given to packetdrill_interface_init)
# and its environment has PACKETDRILL_FAMILY, PACKETDRILL_LOCAL_IP,
# PACKETDRILL_REMOTE_IP, PACKETDRILL_GATEWAY_IP and PACKETDRILL_MTU (the values
# passed to packetdrill for that run), for the stack to learn its address;
# the shared object is preloaded too (LD_PRELOAD), so a getsockopt of its own
# can answer packetdrill's TCP_INFO reads for %{ }% blocks.
# --route-cc cubic: kernel mode only; packetdrill's route to the remote
# address gets `congctl cubic`. defaults.sh sets tcp_congestion_control=cubic,
# but a non-init netns may only pick a CC in the host's
# tcp_allowed_congestion_control, so without this the host default (e.g. bbr)
# stays; a per-route CC is allowed and leaves the host untouched.
#
# Build packetdrill first (bison, flex), outside the read-only shared copy:
#   mkdir -p target/packetdrill-src &&
#     cp -a /work/shared/tools/packetdrill/gtests/net \
#     target/packetdrill-src/ && chmod -R u+w target/packetdrill-src &&
#     (cd target/packetdrill-src/net/packetdrill && ./configure && make)
# Exits 0 when every script ran (whatever the verdicts), 2 on a setup error.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
pd=$here/target/packetdrill-src/net/packetdrill/packetdrill
scripts=$here/target/packetdrill-src/net/tcp
so=
so_flags=
out=
suites="blocking close shutdown nagle sack fast_retransmit fast_recovery slow_start cubic mss epoll inq ts_recent tcp_info syscall_bad_arg eor notsent_lowat gro"
families="ipv4 ipv4-mapped-ipv6 ipv6"
timeout_secs=60
retries=2
logs=
route_cc=
verbose=0

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
die() { echo "packetdrill-suites: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
	case $1 in
	--so) so=${2:?}; shift 2 ;;
	--so-flags) so_flags=$2; shift 2 ;;
	--out) out=${2:?}; shift 2 ;;
	--suites) suites=${2:?}; shift 2 ;;
	--packetdrill) pd=${2:?}; shift 2 ;;
	--scripts) scripts=${2:?}; shift 2 ;;
	--timeout) timeout_secs=${2:?}; shift 2 ;;
	--retries) retries=${2:?}; shift 2 ;;
	--families) families=${2:?}; shift 2 ;;
	--logs) logs=${2:?}; shift 2 ;;
	--route-cc) route_cc=${2:?}; shift 2 ;;
	-v|--verbose) verbose=1; shift ;;
	-h|--help) usage ;;
	*) echo "unknown option: $1" >&2; usage ;;
	esac
done

[ "$(id -u)" = 0 ] || die "needs root (network namespaces, tun, sysctls)"
for t in unshare timeout ip mount; do
	command -v $t >/dev/null || die "$t is needed"
done
[ -x "$pd" ] || die "no packetdrill binary at $pd (build it first)"
pd=$(cd "$(dirname "$pd")" && pwd)/$(basename "$pd")
[ -d "$scripts" ] || die "no scripts directory $scripts"
scripts=$(cd "$scripts" && pwd)
if [ -n "$so" ]; then
	[ -f "$so" ] || die "no shared object $so"
	so=$(cd "$(dirname "$so")" && pwd)/$(basename "$so")
fi
for f in $families; do
	case $f in ipv4|ipv4-mapped-ipv6|ipv6) ;; *) die "unknown family $f" ;; esac
done

# Scripts run `../common/defaults.sh` (tcp/common/defaults.sh, upstream a
# symlink to ../../common/defaults.sh). A copy that turned the symlink into a
# 24-byte text file without an x bit breaks every script: restore the link.
dflt=$scripts/common/defaults.sh
if [ -e "$dflt" ] && [ ! -L "$dflt" ] && [ ! -x "$dflt" ]; then
	if [ "$(cat "$dflt")" = ../../common/defaults.sh ] && [ -w "$scripts/common" ]; then
		rm -f "$dflt" && ln -s ../../common/defaults.sh "$dflt"
		echo "packetdrill-suites: restored symlink $dflt" >&2
	else
		die "$dflt is not executable; make it a symlink to ../../common/defaults.sh"
	fi
fi

# Not under /tmp: each run gets its own tmpfs there.
mkdir -p "$here/target"
work=$(mktemp -d "$here/target/.packetdrill-suites.XXXXXX")
child=
cleanup() {
	if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null || true; wait "$child" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run_all.py's per-family arguments, plus its default --send_omit_free, with
# the IPv4 addresses moved into 198.18.0.0/15 (the shape of run_all.py's
# own: the remote off the local /16, through the gateway). The IPv6 ones stay run_all.py's unique-local ones (a /48 each,
# which packetdrill fixes). TFO_COOKIE is unused by these suites.
family_args() {
	case $1 in
	ipv4) echo "--ip_version=ipv4 --local_ip=198.18.0.1 --gateway_ip=198.18.0.1 --netmask_ip=255.255.0.0 --remote_ip=198.19.2.1 -D TFO_COOKIE=3021b9d889017eeb -D CODE=host_unreachable -D CMSG_LEVEL_IP=SOL_IP -D CMSG_TYPE_RECVERR=IP_RECVERR" ;;
	ipv4-mapped-ipv6) echo "--ip_version=ipv4-mapped-ipv6 --local_ip=198.18.0.1 --gateway_ip=198.18.0.1 --netmask_ip=255.255.0.0 --remote_ip=198.19.2.1 -D TFO_COOKIE=3021b9d889017eeb -D CODE=host_unreachable -D CMSG_LEVEL_IP=SOL_IPV6 -D CMSG_TYPE_RECVERR=IPV6_RECVERR" ;;
	ipv6) echo "--ip_version=ipv6 --mtu=1520 --local_ip=fd3d:0a0b:17d6::1 --gateway_ip=fd3d:0a0b:17d6:8888::1 --remote_ip=fd3d:fa7b:d17d::1 -D TFO_COOKIE=c1d1e9742a47a9bc -D CMSG_LEVEL_IP=SOL_IPV6 -D CMSG_TYPE_RECVERR=IPV6_RECVERR" ;;
	esac
}

# Inside the namespace: a private /tmp (set_sysctls.py's restore files, the
# Python files of %{ }% blocks), lo up; with --so a tun0 exists too, since
# defaults.sh ends with `tc qdisc add dev tun0` and packetdrill makes none.
# A private tmpfs on /tmp, unless what a run needs lives under /tmp (a
# clone there): then /tmp stays, and what a run leaves in it
# (sysctl_restore_*.sh, code_*) is removed after it (tmp_sweep).
under_tmp=0
for p in "$pd" "$scripts" "$so" "$(pwd)"; do
	case $p in /tmp/*) under_tmp=1 ;; esac
done
if [ $under_tmp = 1 ]; then
	ns_setup='ip link set lo up'
else
	ns_setup='mount -t tmpfs tmpfs /tmp && ip link set lo up'
fi
tmp_list() { find /tmp -maxdepth 1 \( -name 'sysctl_restore_*' -o -name 'code_*' \) -newer "$work/mark" 2>/dev/null | sort; }
[ -n "$so" ] && ns_setup="$ns_setup && ip tuntap add dev tun0 mode tun && ip link set tun0 up"

# --route-cc: an `ip` first in PATH that appends `congctl NAME` to the
# `ip route add ... dev tun0 ...` packetdrill runs when it sets up tun0.
run_path=$PATH
if [ -n "$route_cc" ]; then
	mkdir "$work/bin"
	cat > "$work/bin/ip" <<-EOF
	#!/bin/sh
	case " \$* " in
	*" route add "*" dev tun0 "*) exec $(command -v ip) "\$@" congctl $route_cc ;;
	esac
	exec $(command -v ip) "\$@"
	EOF
	chmod +x "$work/bin/ip"
	run_path=$work/bin:$PATH
fi

json_str() {
	local s=$1
	s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\t'/\\t}; s=${s//$'\r'/}; s=${s//$'\n'/\\n}
	s=$(printf '%s' "$s" | tr -d '\000-\010\013-\037')
	printf '"%s"' "$s"
}

# The line that says why a run failed: packetdrill's "<script>:<line>: ..."
# (plus the exception of a failed %{ }% assertion), else any error line.
# defaults.sh's "sysctl: setting key ...: Operation not permitted" is noise
# (a netns may not pick a restricted congestion control), so it is skipped.
first_error() {
	local log=$1 script=$2 line exc
	line=$(grep -m1 -F "$script:" "$log" || true)
	[ -n "$line" ] || line=$(grep -v '^sysctl: setting key' "$log" | grep -m1 -i 'error\|assert\|fail\|timeout\|timed out' || true)
	[ -n "$line" ] || line=$(grep -v '^sysctl: setting key' "$log" | grep -m1 -v '^[[:space:]]*$' || true)
	if [[ $line == *"error in Python code"* ]]; then
		exc=$(grep -E '^[A-Za-z]*(Error|Exception)' "$log" | tail -n1 || true)
		[ -n "$exc" ] && line="$line $exc"
	fi
	printf '%s' "${line:0:400}"
}

# What the stack under a --so run is told about its addresses (as family_args).
so_env() {
	export PACKETDRILL_FAMILY=$1 PACKETDRILL_MTU=1500
	case $1 in
	ipv4|ipv4-mapped-ipv6) PACKETDRILL_LOCAL_IP=198.18.0.1 PACKETDRILL_REMOTE_IP=198.19.2.1 PACKETDRILL_GATEWAY_IP=198.18.0.1 ;;
	ipv6) PACKETDRILL_LOCAL_IP=fd3d:0a0b:17d6::1 PACKETDRILL_REMOTE_IP=fd3d:fa7b:d17d::1 PACKETDRILL_GATEWAY_IP=fd3d:0a0b:17d6:8888::1 PACKETDRILL_MTU=1520 ;;
	esac
	export PACKETDRILL_LOCAL_IP PACKETDRILL_REMOTE_IP PACKETDRILL_GATEWAY_IP
}

# One packetdrill run; sets rc, v (pass/fail), e (first error), secs.
run_one() {
	local dir=$1 script=$2 log=$3 start e2
	shift 3
	start=$EPOCHREALTIME
	touch "$work/mark"
	# With --so, the shared object is also preloaded: packetdrill reads
	# TCP_INFO for %{ }% blocks with its own getsockopt, which it answers.
	local preload=(env)
	[ -z "$so" ] || preload=(env "LD_PRELOAD=$so")
	set +e
	(cd "$dir" && PATH=$run_path exec timeout -k 5 "$timeout_secs" \
		unshare --net --mount --propagation private -- \
		/bin/sh -c "$ns_setup && exec \"\$@\"" sh "${preload[@]}" "$pd" "$@" "$script") \
		> "$log" 2>&1 &
	child=$!
	wait "$child" 2>/dev/null
	rc=$?
	child=
	if [ $under_tmp = 1 ]; then
		tmp_list | while read -r f; do rm -f -- "$f"; done
	fi
	set -e
	if [ $rc = 126 ] || [ $rc = 127 ]; then die "could not run packetdrill: $(head -c 300 "$log")"; fi
	secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
	v=fail e=
	if [ $rc = 0 ]; then
		v=pass
	elif [ $rc = 124 ] || [ $rc = 137 ]; then
		e="timeout after ${timeout_secs}s"
	elif [ $rc -gt 128 ]; then
		e="packetdrill killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null || echo '?'))"
		e2=$(first_error "$log" "$script")
		[ -z "$e2" ] || e="$e; $e2"
	else
		e=$(first_error "$log" "$script")
		[ -n "$e" ] || e="exit status $rc"
	fi
}

[ -n "$out" ] && { mkdir -p "$(dirname "$out")"; : > "$out"; }
[ -n "$logs" ] && mkdir -p "$logs"
mode=kernel; [ -n "$route_cc" ] && mode="kernel+route-cc:$route_cc"; [ -n "$so" ] && mode="so:$so"
echo "packetdrill-suites: $mode; families: $families; timeout ${timeout_secs}s; retries $retries"

total_pass=0 total_fail=0 summary=
for suite in $suites; do
	dir=$scripts/$suite
	[ -d "$dir" ] || die "no suite directory $dir"
	spass=0 stotal=0
	for path in "$dir"/*.pkt; do
		[ -e "$path" ] || continue
		script=$(basename "$path")
		verdict=pass err= variants= flaky=
		for fam in $families; do
			case $fam in ipv4|ipv4-mapped-ipv6) [[ $script == *v6.pkt ]] && continue ;; esac
			case $fam in ipv6) [[ $script == *v4.pkt ]] && continue ;; esac
			log=$work/run.log
			# shellcheck disable=SC2046
			args=(--send_omit_free $(family_args "$fam"))
			if [ -n "$so" ]; then
				args+=("--so_filename=$so")
				[ -z "$so_flags" ] || args+=("--so_flags=$so_flags")
				so_env "$fam"
			fi
			try=0
			while :; do
				try=$((try + 1))
				run_one "$dir" "$script" "$log" "${args[@]}"
				# Retry only what may be timing noise: not hangs or crashes.
				[ $v = pass ] || [ $try -gt "$retries" ] || [ $rc = 124 ] || [ $rc = 137 ] || [ $rc -gt 128 ] && break
				[ -n "$logs" ] && cp "$log" "$logs/$suite.${script%.pkt}.$fam.try$try.log"
			done
			if [ $v = fail ]; then
				verdict=fail
				[ -n "$err" ] || err="[$fam] $e"
			elif [ $try -gt 1 ]; then
				flaky="$flaky${flaky:+ }$fam"
			fi
			[ -n "$logs" ] && cp "$log" "$logs/$suite.${script%.pkt}.$fam.log"
			[ $verbose = 1 ] && printf '  %-4s %s/%s (%s, %.1fs, try %d)%s\n' "$v" "$suite" "$script" "$fam" "$secs" "$try" "${e:+: $e}"
			variants="$variants${variants:+,}$(json_str "$fam"):{\"verdict\":\"$v\",\"tries\":$try,\"error\":$( [ -n "$e" ] && json_str "$e" || echo null ),\"secs\":$secs}"
		done
		[ -n "$variants" ] || continue
		stotal=$((stotal + 1))
		if [ $verdict = pass ]; then spass=$((spass + 1)); fi
		[ $verbose = 1 ] || printf '  %-4s %s/%s%s%s\n' "$verdict" "$suite" "$script" "${err:+: $err}" "${flaky:+ (passed on a retry: $flaky)}"
		if [ -n "$out" ]; then
			printf '{"suite":%s,"script":%s,"verdict":"%s","error":%s,"mode":%s,"variants":{%s}}\n' \
				"$(json_str "$suite")" "$(json_str "$script")" "$verdict" \
				"$( [ -n "$err" ] && json_str "$err" || echo null )" "$(json_str "$mode")" \
				"$variants" >> "$out"
		fi
	done
	total_pass=$((total_pass + spass)); total_fail=$((total_fail + stotal - spass))
	summary="$summary$(printf '%-16s %3d/%-3d' "$suite" "$spass" "$stotal")"$'\n'
done

echo
echo "per suite (pass/total):"
printf '%s' "$summary"
echo "packetdrill: $total_pass passed, $total_fail failed"
[ -n "$out" ] && echo "wrote $out"
exit 0
