#!/bin/sh
# crijournal's package, once its files are in place: what `make install` does beyond
# copying them (see the Makefile). Run by dpkg as `postinst configure [OLD-VERSION]` and by
# rpm as %post with 1 (install) or 2 (upgrade).
#
#   - the default CNI network, only where /etc/cni/net.d has none, and the permissive
#     signature policy, only where /etc/containers/policy.json is missing, each recorded
#     with its checksum in the manifest, so that the removal takes back only what is
#     still as installed (make uninstall's rule);
#   - systemd: daemon-reload; on a first install the unit is enabled (.deb: and started),
#     as Debian's containerd package does; on an upgrade a running daemon is restarted,
#     which keeps every pod (KillMode=process: conmon and the pause processes stay).
#
# /var/lib/crijournal (the journal, the storage) is never touched.
set -e

share=/usr/share/crijournal
manifest=$share/installed-files

case "$1" in
configure) if [ -z "$2" ]; then first=yes; else first=no; fi; format=deb ;;
1) first=yes; format=rpm ;;
2) first=no; format=rpm ;;
*) exit 0 ;; # dpkg's abort-upgrade, abort-remove, ...
esac

put() { # put SOURCE DESTINATION: install it and record it in the manifest
	install -D -m 0644 "$1" "$2"
	sha256sum "$2" >>"$manifest"
	echo "crijournal: installed $2"
}
if [ -n "$(ls /etc/cni/net.d/*.conf /etc/cni/net.d/*.conflist /etc/cni/net.d/*.json 2>/dev/null)" ]; then
	echo "crijournal: kept the CNI network in /etc/cni/net.d"
else
	put $share/10-crijournal-bridge.conflist /etc/cni/net.d/10-crijournal-bridge.conflist
fi
if [ -e /etc/containers/policy.json ]; then
	echo "crijournal: kept /etc/containers/policy.json"
else
	put $share/policy.json /etc/containers/policy.json
fi

# systemd: only what works without it running (a chroot, an image build) is done then.
running=no
if [ -d /run/systemd/system ]; then
	running=yes
	systemctl daemon-reload || true
fi
if [ "$first" = yes ]; then
	if command -v systemctl >/dev/null 2>&1; then
		if [ "$format" = deb ]; then
			systemctl enable crijournal.service || true
		else
			systemctl preset crijournal.service || true # Fedora's %systemd_post
		fi
	fi
	if [ "$running" = yes ] && [ "$format" = deb ]; then
		systemctl start crijournal.service ||
			echo "crijournal: the service did not start: see journalctl -u crijournal" >&2
	fi
elif [ "$running" = yes ]; then
	systemctl try-restart crijournal.service ||
		echo "crijournal: the service did not restart: see journalctl -u crijournal" >&2
fi
exit 0
