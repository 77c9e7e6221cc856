package netns

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

func TestInterfaces(t *testing.T) {
	requirePlugins(t) // for ip and nsenter
	paths, err := Pin(context.Background(), t.TempDir(), newSandboxID(t), []Kind{Net}, "")
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	unpinAll(t, paths)
	ns := paths[Net]

	ifs, err := Interfaces(ns)
	if err != nil || len(ifs) != 0 {
		t.Fatalf("Interfaces of a namespace with loopback only = %v, %v; want none (loopback is left out)", ifs, err)
	}
	// A veth pair, eth0 and peer1, up, with a packet sent through eth0.
	for _, args := range [][]string{
		{"link", "add", "eth0", "type", "veth", "peer", "name", "peer1"},
		{"link", "set", "peer1", "up"},
		{"link", "set", "eth0", "up"},
		{"addr", "add", "192.0.2.1/24", "dev", "eth0"},
	} {
		if out, err := exec.Command("nsenter", append([]string{"--net=" + ns, "ip"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	// A ping of another address on eth0's subnet sends (ARP) through it.
	_ = exec.Command("nsenter", "--net="+ns, "bash", "-c", "echo hi > /dev/udp/192.0.2.2/9").Run()
	// The checks below tell what is missing if eth0 has sent nothing within 5s.
	_ = testenv.Poll(5*time.Second, 20*time.Millisecond, func() error {
		if ifs, err = Interfaces(ns); err != nil {
			t.Fatal(err)
		}
		if len(ifs) != 2 || ifs[0].TxBytes > 0 {
			return nil
		}
		return errors.New("eth0 has sent nothing yet")
	})
	if len(ifs) != 2 || ifs[0].Name != "eth0" || ifs[1].Name != "peer1" {
		t.Fatalf("Interfaces = %+v, want eth0 and peer1, sorted", ifs)
	}
	if ifs[0].TxPackets == 0 || ifs[0].TxBytes == 0 || ifs[1].RxBytes != ifs[0].TxBytes {
		t.Errorf("counters %+v, want eth0's sent bytes received by its peer", ifs)
	}
	if _, err := Interfaces(t.TempDir()); err == nil {
		t.Error("Interfaces of a directory that is no namespace succeeded")
	}
}
