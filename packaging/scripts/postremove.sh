#!/bin/sh
# crijournal's package, once its files are gone: on the last removal (dpkg `postrm
# remove`, rpm %postun 0) what the postinstall script put outside the package (the CNI
# network, the signature policy) is removed where it is still as installed, and named
# and kept where it changed: make uninstall's rule. dpkg's purge removes the
# configuration file (an edited one is kept until then; rpm keeps it as .rpmsave). The
# journal and the storage under /var/lib/crijournal are never touched, purge or not.
set -e
case "$1" in
remove | 0) ;;
*) exit 0 ;; # upgrade, purge (after remove), failed-upgrade, abort-*
esac
share=/usr/share/crijournal
manifest=$share/installed-files
if [ -e "$manifest" ]; then
	while read -r sum path; do
		[ -e "$path" ] || continue
		if [ "$(sha256sum <"$path" | cut -d' ' -f1)" = "$sum" ]; then
			rm -f "$path"
			echo "crijournal: removed $path"
		else
			echo "crijournal: kept $path (changed since install)"
		fi
	done <"$manifest"
	rm -f "$manifest"
fi
rmdir $share 2>/dev/null || true
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
exit 0
