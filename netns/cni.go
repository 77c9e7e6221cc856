package netns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/crijournal/crijournal/internal/durable"
	"golang.org/x/sys/unix"
)

// ErrNoNetwork is returned (wrapped, with the directory) by LoadNetwork when
// the CNI configuration directory holds no usable network configuration; the
// runtime then reports NetworkReady=false.
var ErrNoNetwork = errors.New("no CNI network configuration")

// DefaultIfName is the interface name used inside the sandbox when the caller
// passes an empty one.
const DefaultIfName = "eth0"

// confExtensions are the file extensions LoadNetwork considers, as CRI-O and
// containerd do.
var confExtensions = []string{".conflist", ".conf", ".json"}

// Network is a CNI network configuration (a plugin list) together with the
// plugin directories and the libcni cache directory used to run it. It is
// safe for concurrent use.
type Network struct {
	list     *libcni.NetworkConfigList
	cni      *libcni.CNIConfig
	cacheDir string
}

// LoadNetwork returns the first network configuration in confDir: the files
// *.conflist, *.conf and *.json sorted by name, the first that parses is
// taken; files that do not parse are skipped, as CRI-O does. A single plugin
// configuration (a file without "plugins") is converted to a list of one.
// With no usable file (or no directory at all) the error wraps ErrNoNetwork.
//
// Plugins are looked up in pluginDirs, in order. libcni keeps the result of
// each ADD under cacheDir/results (Detach needs it); an empty cacheDir means
// libcni's default, /var/lib/cni.
func LoadNetwork(confDir string, pluginDirs []string, cacheDir string) (*Network, error) {
	if len(pluginDirs) == 0 {
		return nil, fmt.Errorf("load CNI network from %s: %w: no plugin directories", confDir, ErrInvalid)
	}
	if cacheDir == "" {
		cacheDir = libcni.CacheDir
	}
	files, err := libcni.ConfFiles(confDir, confExtensions)
	if err != nil {
		return nil, fmt.Errorf("load CNI network from %s: %w", confDir, err)
	}
	slices.Sort(files)
	var errs []error
	for _, file := range files {
		list, err := loadConfFile(file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return &Network{
			list:     list,
			cni:      libcni.NewCNIConfigWithCacheDir(slices.Clone(pluginDirs), cacheDir, &pluginExec{}),
			cacheDir: cacheDir,
		}, nil
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w in %s: no file parses: %w", ErrNoNetwork, confDir, errors.Join(errs...))
	}
	return nil, fmt.Errorf("%w in %s", ErrNoNetwork, confDir)
}

// loadConfFile reads one configuration file as a plugin list.
func loadConfFile(file string) (*libcni.NetworkConfigList, error) {
	var list *libcni.NetworkConfigList
	if filepath.Ext(file) == ".conflist" {
		l, err := libcni.NetworkConfFromFile(file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		list = l
	} else {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		var probe struct {
			Plugins json.RawMessage `json:"plugins"`
		}
		if err := json.Unmarshal(data, &probe); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if probe.Plugins != nil {
			l, err := libcni.NetworkConfFromFile(file)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			list = l
		} else {
			conf, err := libcni.NetworkPluginConfFromBytes(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			//lint:ignore SA1019 single-plugin files are still what many installers write.
			l, err := libcni.ConfListFromConf(conf)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			list = l
		}
	}
	if e := utils.ValidateNetworkName(list.Name); e != nil {
		return nil, fmt.Errorf("%s: %w", file, e)
	}
	return list, nil
}

// Name returns the name of the network, as in its configuration.
func (n *Network) Name() string { return n.list.Name }

// Config returns the network's configuration as a CNI plugin list (JSON); empty for a
// network known by its name only (see Networks.Attached).
func (n *Network) Config() []byte { return n.list.Bytes }

// Result is what Attach reports about a sandbox's attachment.
type Result struct {
	// IPs are the sandbox's addresses without mask, IPv4 ones first, in the
	// plugin's order otherwise.
	IPs []string
	// Interface is the name of the sandbox-side interface.
	Interface string
	// Raw is the CNI result as JSON, converted by types100 (package
	// github.com/containernetworking/cni/pkg/types/100) whatever version the
	// plugins answered in. Note its cniVersion reads "1.1.0", the version
	// types100 implements, even for a 1.0.0 network: the result format did
	// not change between the two.
	Raw json.RawMessage
}

// Attach runs CNI ADD for the sandbox (libcni AddNetworkList): it attaches the
// network namespace at netnsPath to the network through an interface named
// ifName ("eth0" if empty). args become CNI_ARGS, typically K8S_POD_NAMESPACE,
// K8S_POD_NAME, K8S_POD_INFRA_CONTAINER_ID and K8S_POD_UID;
// K8S_POD_INFRA_CONTAINER_ID defaults to sandboxID and IgnoreUnknown=1 is
// added (as CRI-O and containerd do) so plugins that do not know the K8S_
// arguments accept them. caps are the CNI capability arguments (libcni passes each to
// the plugins that declare the capability, e.g. "portMappings" to portmap); nil for none.
//
// Attach does not undo a failed ADD: a plugin may have done part of its work
// (allocated an address) before failing or being killed when ctx ended. The
// caller runs Detach with the same arguments as the undo, whether Attach
// succeeded or not.
func (n *Network) Attach(ctx context.Context, sandboxID, netnsPath, ifName string, args map[string]string, caps map[string]any) (*Result, error) {
	if netnsPath == "" {
		return nil, fmt.Errorf("attach %s to network %s: %w: empty network namespace path", sandboxID, n.Name(), ErrInvalid)
	}
	rt, err := runtimeConf(sandboxID, netnsPath, ifName, args, caps)
	if err != nil {
		return nil, fmt.Errorf("attach to network %s: %w", n.Name(), err)
	}
	r, err := n.cni.AddNetworkList(ctx, n.list, rt)
	if err != nil {
		return nil, fmt.Errorf("attach %s to network %s: %w", sandboxID, n.Name(), err)
	}
	res, err := convertResult(r, rt.IfName)
	if err != nil {
		return nil, fmt.Errorf("attach %s to network %s: %w", sandboxID, n.Name(), err)
	}
	return res, nil
}

// Detach runs CNI DEL for the sandbox (libcni DelNetworkList); it is the undo
// of Attach and takes the same arguments (the capability arguments too, so that portmap
// removes the rules of the same host ports). It is idempotent: it succeeds for a
// sandbox that was never attached, or already detached. When netnsPath no
// longer exists (or is no longer a namespace, e.g. after Unpin), the plugins
// get an empty CNI_NETNS, as CRI-O and containerd do, so that IPAM still
// releases the sandbox's addresses. When libcni cached the configuration used
// at ADD time, that configuration is used, so that the release reaches the
// network the addresses came from. A network known by its name only (see
// Networks.Attached) works through that cache alone. On success the libcni cache entry is gone.
func (n *Network) Detach(ctx context.Context, sandboxID, netnsPath, ifName string, args map[string]string, caps map[string]any) error {
	rt, err := runtimeConf(sandboxID, netnsPath, ifName, args, caps)
	if err != nil {
		return fmt.Errorf("detach from network %s: %w", n.Name(), err)
	}
	if netnsPath != "" {
		var st unix.Statfs_t
		err := unix.Statfs(netnsPath, &st)
		switch {
		case errors.Is(err, unix.ENOENT):
			rt.NetNS = ""
		case err != nil:
			return fmt.Errorf("detach %s from network %s: network namespace: %w", sandboxID, n.Name(), err)
		case st.Type != unix.NSFS_MAGIC:
			rt.NetNS = "" // an unmounted pin file: the namespace is gone
		}
	}

	list := n.list
	if cached, cachedRT, err := n.cni.GetNetworkListCachedConfig(list, rt); err == nil && cached != nil {
		if l, err := libcni.NetworkConfFromBytes(cached); err == nil && l.Name == list.Name && len(l.Plugins) > 0 {
			list, rt = l, cachedRT
		}
	}
	if len(list.Plugins) == 0 {
		return fmt.Errorf("detach %s from network %s: %w: the configuration of the network is neither in libcni's cache nor recorded", sandboxID, n.Name(), ErrNoNetwork)
	}
	if err := n.cni.DelNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("detach %s from network %s: %w", sandboxID, n.Name(), err)
	}
	// libcni ignores a failure to remove its cache entry; make sure it is
	// gone, or the next ADD with this ID would see a stale previous result.
	cacheFile := filepath.Join(n.cacheDir, "results", fmt.Sprintf("%s-%s-%s", list.Name, rt.ContainerID, rt.IfName))
	if err := os.Remove(cacheFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("detach %s from network %s: remove cached result: %w", sandboxID, n.Name(), err)
	}
	// The removal is made durable before the caller's journal can record the undo done:
	// libcni writes and removes its cache without fsync, and a power cut that kept the
	// journal's later commit but lost this unlink left a cache entry no record owns
	// (make test-powerloss found one).
	if err := durable.SyncDir(filepath.Dir(cacheFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("detach %s from network %s: flush the removal of the cached result: %w", sandboxID, n.Name(), err)
	}
	return nil
}

// runtimeConf validates the arguments of Attach and Detach and builds the
// libcni runtime configuration from them.
func runtimeConf(sandboxID, netnsPath, ifName string, args map[string]string, caps map[string]any) (*libcni.RuntimeConf, error) {
	if err := validateID(sandboxID); err != nil {
		return nil, err
	}
	if ifName == "" {
		ifName = DefaultIfName
	}
	if e := utils.ValidateInterfaceName(ifName); e != nil {
		return nil, fmt.Errorf("interface name %q: %w: %v", ifName, ErrInvalid, e)
	}
	cniArgs := [][2]string{}
	if _, ok := args["IgnoreUnknown"]; !ok {
		cniArgs = append(cniArgs, [2]string{"IgnoreUnknown", "1"})
	}
	if _, ok := args["K8S_POD_INFRA_CONTAINER_ID"]; !ok {
		cniArgs = append(cniArgs, [2]string{"K8S_POD_INFRA_CONTAINER_ID", sandboxID})
	}
	for _, k := range slices.Sorted(maps.Keys(args)) {
		v := args[k]
		// CNI_ARGS is "K=V;K=V": a key with '=' or ';', or a value with ';',
		// would be read back as other arguments.
		if k == "" || strings.ContainsAny(k, "=;") || strings.Contains(v, ";") {
			return nil, fmt.Errorf("CNI argument %q=%q: %w: keys must be non-empty without '=' or ';', values without ';'", k, v, ErrInvalid)
		}
		cniArgs = append(cniArgs, [2]string{k, v})
	}
	return &libcni.RuntimeConf{
		ContainerID:    sandboxID,
		NetNS:          netnsPath,
		IfName:         ifName,
		Args:           cniArgs,
		CapabilityArgs: caps,
	}, nil
}

// convertResult converts a plugin result of any version to a Result.
func convertResult(r types.Result, ifName string) (*Result, error) {
	res, err := types100.NewResultFromResult(r)
	if err != nil {
		return nil, fmt.Errorf("convert CNI result: %w", err)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encode CNI result: %w", err)
	}
	out := &Result{Interface: ifName, Raw: raw}
	var v6 []string
	for _, ipc := range res.IPs {
		ip := ipc.Address.IP
		if ip.To4() != nil {
			out.IPs = append(out.IPs, ip.String())
		} else {
			v6 = append(v6, ip.String())
		}
	}
	out.IPs = append(out.IPs, v6...)
	// Prefer the name the plugin reports for the sandbox side, if it does.
	name := ""
	for _, iface := range res.Interfaces {
		if iface == nil || iface.Sandbox == "" || iface.Name == "" {
			continue
		}
		if iface.Name == ifName {
			name = ifName
			break
		}
		if name == "" {
			name = iface.Name
		}
	}
	if name != "" {
		out.Interface = name
	}
	return out, nil
}
