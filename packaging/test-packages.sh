#!/bin/bash
# test-packages.sh NEW.deb OLD.deb NEW.rpm OLD.rpm: installs the packages, upgrades from the
# older to the newer (same layout, lower version), edits the configuration, removes and
# purges, checking each step, in a root the host never sees: a private mount namespace
# with an overlay over / (the changes go to a tmpfs) and chroot. Each format gets an
# overlay of its own. Run by packages_test.go (go test ./packaging/, as root).
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: $0 NEW.deb OLD.deb NEW.rpm OLD.rpm" >&2; exit 2; }

if [ -z "${IN_PRIVATE_NS:-}" ]; then
	exec env IN_PRIVATE_NS=1 unshare --mount --propagation private "$0" "$@"
fi

# inside ROOT-SCRIPT FILES...: runs the script in a fresh overlay root with FILES in its /tmp.
inside() {
	local script=$1
	shift
	local t
	t=$(mktemp -d)
	mount -t tmpfs tmpfs "$t"
	mkdir "$t/upper" "$t/work" "$t/root"
	mount -t overlay overlay -o "lowerdir=/,upperdir=$t/upper,workdir=$t/work" "$t/root"
	mount -t proc proc "$t/root/proc"
	mount --rbind /dev "$t/root/dev"
	mount -t tmpfs tmpfs "$t/root/run" # no /run/systemd/system: no daemon to talk to
	mount -t tmpfs tmpfs "$t/root/tmp"
	cp "$@" "$t/root/tmp/"
	local rc=0
	chroot "$t/root" /bin/bash -euo pipefail -c "$script" || rc=$?
	umount -R "$t/root" 2>/dev/null || umount -l "$t/root"
	umount -l "$t"
	rmdir "$t"
	return $rc
}

# What every step checks, shared by both formats (defined in the chroot).
common='
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }
bins="/usr/bin/crijournal /usr/bin/crijournal-pause /usr/bin/crijournal-pause-sleep"
unit=/usr/lib/systemd/system/crijournal.service
conf=/etc/crijournal/crijournal.toml
cni=/etc/cni/net.d/10-crijournal-bridge.conflist
policy=/etc/containers/policy.json
manifest=/usr/share/crijournal/installed-files
installed() {
	for f in $bins $unit /usr/share/bash-completion/completions/crijournal /usr/share/crijournal/crictl.yaml $conf; do
		[ -e "$f" ] || fail "$f missing after $1"
	done
	grep -q "^ExecStart=/usr/bin/crijournal serve" $unit || fail "the unit does not run /usr/bin/crijournal"
	crijournal config --config $conf >/dev/null || fail "the packaged configuration does not load"
}
gone() {
	for f in $bins $unit /usr/share/bash-completion/completions/crijournal /usr/share/crijournal; do
		[ ! -e "$f" ] || fail "$f left after $1"
	done
}
# /var/lib/crijournal: a journal of the node, which no step may touch.
mkdir -p /var/lib/crijournal
echo "a journal" >/var/lib/crijournal/journal.db-sentinel
state() { find /var/lib/crijournal -printf "%p %s %T@\n" | sort; }
state >/tmp/state.before
untouched() { state | cmp -s - /tmp/state.before || fail "/var/lib/crijournal changed by $1"; }
# A node without a CNI network nor a signature policy: the package puts its defaults.
rm -f /etc/cni/net.d/* $policy
'

deb="$common"'
wants=/etc/systemd/system/multi-user.target.wants/crijournal.service
step "dpkg -i $(basename /tmp/old.deb)"
dpkg -i /tmp/old.deb >/tmp/log 2>&1 || { cat /tmp/log; fail "dpkg -i"; }
installed "install"
[ -L $wants ] || fail "the unit was not enabled on install"
cmp -s $cni /usr/share/crijournal/10-crijournal-bridge.conflist || fail "the default CNI network was not installed"
cmp -s $policy /usr/share/crijournal/policy.json || fail "the default policy was not installed"
[ "$(wc -l <$manifest)" = 2 ] || fail "manifest: $(cat $manifest)"
old=$(dpkg-query -W -f="\${Version}" crijournal)

step "the configuration edited, then dpkg -i $(basename /tmp/new.deb) (upgrade)"
echo "log_level = '\''debug'\''" >>$conf
dpkg -i /tmp/new.deb >/tmp/log 2>&1 || { cat /tmp/log; fail "dpkg -i (upgrade)"; }
new=$(dpkg-query -W -f="\${Version}" crijournal)
[ "$new" != "$old" ] && dpkg --compare-versions "$new" gt "$old" || fail "version $old -> $new"
installed "upgrade"
grep -q "^log_level = .debug." $conf || fail "the edited configuration was replaced on upgrade"
[ -L $wants ] || fail "the unit was disabled by the upgrade"
[ "$(wc -l <$manifest)" = 2 ] || fail "manifest after upgrade: $(cat $manifest)"
untouched "install and upgrade"

step "the policy edited, then dpkg -r"
echo "{\"default\":[{\"type\":\"reject\"}]}" >$policy
dpkg -r crijournal >/tmp/log 2>&1 || { cat /tmp/log; fail "dpkg -r"; }
gone "remove"
[ ! -e $wants ] || fail "the unit is still enabled after remove"
grep -q "^log_level = .debug." $conf || fail "the edited configuration was not kept on remove"
[ ! -e $cni ] || fail "the unchanged default CNI network was left"
grep -q reject $policy || fail "the edited policy was removed"
untouched "remove"

step "dpkg -P"
dpkg -P crijournal >/tmp/log 2>&1 || { cat /tmp/log; fail "dpkg -P"; }
[ ! -e $conf ] || fail "the configuration is left after purge"
! dpkg-query -W crijournal >/dev/null 2>&1 || fail "still known to dpkg after purge"
untouched "purge"
echo "deb: ok"
'

rpm="$common"'
q() { rpm -q --qf "%{VERSION}-%{RELEASE}" crijournal; }
step "rpm -i $(basename /tmp/old.rpm)"
rpm -i --nodeps /tmp/old.rpm >/tmp/log 2>&1 || { cat /tmp/log; fail "rpm -i"; }
installed "install"
cmp -s $cni /usr/share/crijournal/10-crijournal-bridge.conflist || fail "the default CNI network was not installed"
cmp -s $policy /usr/share/crijournal/policy.json || fail "the default policy was not installed"
old=$(q)
rpm -q --configfiles crijournal | grep -qx $conf || fail "$conf is not a configuration file of the rpm"

step "the configuration edited, then rpm -U $(basename /tmp/new.rpm)"
echo "log_level = '\''debug'\''" >>$conf
rpm -U --nodeps /tmp/new.rpm >/tmp/log 2>&1 || { cat /tmp/log; fail "rpm -U"; }
new=$(q)
[ "$new" != "$old" ] || fail "version $old -> $new"
installed "upgrade"
grep -q "^log_level = .debug." $conf || fail "the edited configuration was replaced on upgrade"
[ -e $cni ] || fail "the upgrade removed the default CNI network"
[ "$(wc -l <$manifest)" = 2 ] || fail "manifest after upgrade: $(cat $manifest)"
untouched "install and upgrade"

step "the policy edited, then rpm -e"
echo "{\"default\":[{\"type\":\"reject\"}]}" >$policy
rpm -e crijournal >/tmp/log 2>&1 || { cat /tmp/log; fail "rpm -e"; }
gone "erase"
grep -q "^log_level = .debug." $conf.rpmsave || fail "the edited configuration was not kept (as .rpmsave) on erase"
[ ! -e $cni ] || fail "the unchanged default CNI network was left"
grep -q reject $policy || fail "the edited policy was removed"
! rpm -q crijournal >/dev/null 2>&1 || fail "still known to rpm after erase"
untouched "erase"
echo "rpm: ok"
'

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$1" "$work/new.deb"; cp "$2" "$work/old.deb"; cp "$3" "$work/new.rpm"; cp "$4" "$work/old.rpm"
inside "$deb" "$work/new.deb" "$work/old.deb"
inside "$rpm" "$work/new.rpm" "$work/old.rpm"
