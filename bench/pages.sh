# Sourced by the benchmarks: page-cache conditions alike for every command.
#
# This machine is a VM whose balloon driver hands free guest pages back to
# the host a few seconds after they are freed; the first write into such a
# page costs a host fault, so writing a fresh 2 GiB costs 6 s of system
# time where the same write into recently freed pages costs 0.5 s. Which
# command of a run meets which kind of page then depends on its place in
# the run, not on the command. `recycle_memory` makes every measured
# command meet the cheap kind: it fills and frees MIB of tmpfs just before
# the command (outside its timing).

recycle_memory() { # recycle_memory MIB
	local f
	f=$(mktemp /dev/shm/sealvol-bench-recycle.XXXXXX)
	head -c "$(($1 * 1048576))" /dev/zero >"$f" 2>/dev/null || true
	rm -f "$f"
}
