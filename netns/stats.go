package netns

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	vnetns "github.com/vishvananda/netns"
)

// InterfaceStats are the counters of one network interface.
type InterfaceStats struct {
	Name                 string
	RxBytes, RxErrors    uint64
	TxBytes, TxErrors    uint64
	RxPackets, TxPackets uint64
	RxDropped, TxDropped uint64
}

// Interfaces reads the counters of every interface but loopback in the network
// namespace pinned at path, sorted by name, over a netlink socket opened in that
// namespace (no process is started).
func Interfaces(path string) ([]InterfaceStats, error) {
	ns, err := vnetns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("interfaces of %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("interfaces of %s: %w", path, err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("interfaces of %s: %w", path, err)
	}
	var out []InterfaceStats
	for _, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback != 0 || a.Statistics == nil {
			continue
		}
		s := a.Statistics
		out = append(out, InterfaceStats{
			Name: a.Name, RxBytes: s.RxBytes, RxErrors: s.RxErrors, TxBytes: s.TxBytes, TxErrors: s.TxErrors,
			RxPackets: s.RxPackets, TxPackets: s.TxPackets, RxDropped: s.RxDropped, TxDropped: s.TxDropped,
		})
	}
	slices.SortFunc(out, func(a, b InterfaceStats) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
