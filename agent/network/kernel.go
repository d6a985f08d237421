package network

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// cmdTimeout bounds one ip or nft run.
const cmdTimeout = 30 * time.Second

// findTool resolves a program: the configured path, else name in PATH,
// /usr/sbin or /sbin.
func findTool(configured, name, pkg string) (string, error) {
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return "", fmt.Errorf("instance network: %s: %w", name, err)
		}
		return configured, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("instance network: %s is missing (Debian package %s)", name, pkg)
}

// Missing says which program an instance network needs is missing ("nft
// is missing (Debian package nftables)"), found as New finds them, or ""
// when both are there.
func Missing() string {
	for _, t := range []struct{ name, pkg string }{{"ip", "iproute2"}, {"nft", "nftables"}} {
		if _, err := findTool("", t.name, t.pkg); err != nil {
			return strings.TrimPrefix(err.Error(), "instance network: ")
		}
	}
	return ""
}

// run runs a program with stdin and returns its standard output; its
// error output is in the error.
func run(ctx context.Context, stdin []byte, prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(out.String())
		}
		return nil, fmt.Errorf("%s %s: %w: %s", filepath.Base(prog), strings.Join(args, " "), err, msg)
	}
	return out.Bytes(), nil
}

// ipBatch runs ip(8) commands, one per line, on the host (netns "") or in
// a named network namespace, stopping at the first that fails.
func (n *Network) ipBatch(ctx context.Context, netns string, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	args := []string{"-batch", "-"}
	if netns != "" {
		args = append([]string{"-n", netns}, args...)
	}
	_, err := run(ctx, []byte(strings.Join(lines, "\n")+"\n"), n.cfg.IP, args...)
	return err
}

// linkExists says whether the host has an interface of that name.
func linkExists(name string) bool {
	_, err := os.Lstat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// delLink deletes a host interface if it exists; deleting one end of a
// veth pair deletes both.
func (n *Network) delLink(ctx context.Context, name string) error {
	if !linkExists(name) {
		return nil
	}
	if _, err := run(ctx, nil, n.cfg.IP, "link", "del", "dev", name); err != nil && linkExists(name) {
		return err
	}
	return nil
}

// delNetns deletes a named network namespace if it exists.
func (n *Network) delNetns(ctx context.Context, name string) error {
	p := filepath.Join(NetnsDir, name)
	if _, err := os.Lstat(p); err != nil {
		return nil
	}
	if _, err := run(ctx, nil, n.cfg.IP, "netns", "del", name); err != nil {
		if _, serr := os.Lstat(p); serr == nil {
			return err
		}
	}
	return nil
}

// disableIPv6 turns IPv6 off in the calling thread's network namespace:
// on every interface it has ("all") and every one it gets ("default"). A
// kernel without IPv6 has nothing to turn off.
func disableIPv6() error {
	for _, k := range []string{"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6"} {
		if err := writeSysctl(k, "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// writeSysctl writes a value under /proc/sys.
func writeSysctl(key, value string) error {
	return os.WriteFile(filepath.Join("/proc/sys", key), []byte(value+"\n"), 0o644)
}

// link is what ip -json -details link show says of an interface.
type link struct {
	Name     string `json:"ifname"`
	Alias    string `json:"ifalias"`
	Master   string `json:"master"`
	LinkInfo struct {
		Kind string `json:"info_kind"`
	} `json:"linkinfo"`
}

// strays is what the network made that belongs to no instance.
type strays struct {
	links []string
	netns []string
}

// load reads the network's state from the host: its bridges and veths
// (by name and alias) and its namespaces. It replaces what the network
// knew, and returns what belongs to nothing: links with the network's
// names whose alias is missing or unreadable, veths of no known bridge,
// and namespaces of no instance.
func (n *Network) load(ctx context.Context) (strays, error) {
	var s strays
	out, err := run(ctx, nil, n.cfg.IP, "-json", "-details", "link", "show")
	if err != nil {
		return s, fmt.Errorf("instance network: read the host's links: %w", err)
	}
	var links []link
	if err := json.Unmarshal(out, &links); err != nil {
		return s, fmt.Errorf("instance network: read the host's links: %w", err)
	}
	n.insts, n.tenants = map[string]*instance{}, map[string]*tenantNet{}
	bridges := map[string]*tenantNet{}
	var veths []link
	for _, l := range links {
		isBridge, isVeth := strings.HasPrefix(l.Name, n.bridgePrefix()), strings.HasPrefix(l.Name, n.vethPrefix())
		if !isBridge && !isVeth {
			continue
		}
		v, mine, ok := n.parseAlias(l.Alias)
		if !mine {
			continue // another network's, or not the network's at all
		}
		switch {
		case !ok:
			s.links = append(s.links, l.Name)
		case isBridge && l.LinkInfo.Kind == "bridge":
			block, err := netip.ParsePrefix(v.Get("block"))
			t := v.Get("tenant")
			if err != nil || checkID("tenant", t) != nil || n.tenants[t] != nil || !n.cfg.Subnet.Contains(block.Addr()) {
				s.links = append(s.links, l.Name)
				continue
			}
			tn := &tenantNet{tenant: t, bridge: l.Name, block: block}
			n.tenants[t], bridges[l.Name] = tn, tn
		case isVeth && l.LinkInfo.Kind == "veth":
			veths = append(veths, l)
		default:
			s.links = append(s.links, l.Name)
		}
	}
	for _, l := range veths {
		v, _, _ := n.parseAlias(l.Alias)
		id, t := v.Get("instance"), v.Get("tenant")
		addr, err := netip.ParseAddr(v.Get("addr"))
		br := bridges[l.Master]
		if err != nil || checkID("instance", id) != nil || br == nil || br.tenant != t || !br.block.Contains(addr) || n.insts[id] != nil {
			s.links = append(s.links, l.Name)
			continue
		}
		n.insts[id] = &instance{id: id, tenant: t, addr: addr, veth: l.Name}
	}
	ents, err := os.ReadDir(NetnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return s, fmt.Errorf("instance network: %w", err)
	}
	for _, e := range ents {
		id, ok := strings.CutPrefix(e.Name(), n.cfg.Table+"-")
		if ok && n.insts[id] == nil {
			s.netns = append(s.netns, e.Name())
		}
	}
	return s, nil
}

// parseAlias reads a link's alias: mine says it names the network's table,
// ok that it is complete.
func (n *Network) parseAlias(alias string) (v url.Values, mine, ok bool) {
	rest, found := strings.CutPrefix(alias, aliasPrefix)
	if alias == "" {
		// A link of the network's names without an alias is one that a
		// setup left halfway.
		return nil, true, false
	}
	if !found {
		return nil, false, false
	}
	v, err := url.ParseQuery(rest)
	if err != nil {
		return nil, false, false
	}
	if v.Get("table") != n.cfg.Table {
		return nil, false, false
	}
	return v, true, true
}

// nft runs an nft script in one transaction.
func (n *Network) nft(ctx context.Context, script string) error {
	if _, err := run(ctx, []byte(script), n.cfg.NFT, "-f", "-"); err != nil {
		return fmt.Errorf("instance network rules: %w", err)
	}
	return nil
}

// apply replaces the network's tables with the rules of the instances it
// knows now, in one transaction.
func (n *Network) apply(ctx context.Context) error {
	return n.nft(ctx, n.deleteTables()+n.ruleset())
}
