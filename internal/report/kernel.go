package report

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// KernelDrops counts what this host's kernel dropped: UDP datagrams lost
// to full socket buffers, TCP connections and segments dropped at listen
// queues and backlogs, and packets the softnet backlog dropped. It only
// describes the machine it is read on, so it means something for the relay
// only when the relay runs here (the relay child replay starts, or
// --target on loopback).
type KernelDrops struct {
	UDPRcvbufErrors float64 `json:"udp_rcvbuf_errors"`
	UDPSndbufErrors float64 `json:"udp_sndbuf_errors"`
	TCPListenDrops  float64 `json:"tcp_listen_drops"`
	TCPBacklogDrops float64 `json:"tcp_backlog_drops"`
	SoftnetDropped  float64 `json:"softnet_dropped"`
}

// Total is the sum of every kind of drop.
func (k KernelDrops) Total() float64 {
	return k.UDPRcvbufErrors + k.UDPSndbufErrors +
		k.TCPListenDrops + k.TCPBacklogDrops + k.SoftnetDropped
}

// Sub is the drops between two readings.
func (k KernelDrops) Sub(before KernelDrops) KernelDrops {
	return KernelDrops{
		UDPRcvbufErrors: delta(before.UDPRcvbufErrors, k.UDPRcvbufErrors),
		UDPSndbufErrors: delta(before.UDPSndbufErrors, k.UDPSndbufErrors),
		TCPListenDrops:  delta(before.TCPListenDrops, k.TCPListenDrops),
		TCPBacklogDrops: delta(before.TCPBacklogDrops, k.TCPBacklogDrops),
		SoftnetDropped:  delta(before.SoftnetDropped, k.SoftnetDropped),
	}
}

// ReadKernelDrops reads the counters from /proc (this process's network
// namespace).
func ReadKernelDrops() (KernelDrops, error) {
	fs, err := procfs.NewFS(procfs.DefaultMountPoint)
	if err != nil {
		return KernelDrops{}, fmt.Errorf("kernel drops: open /proc: %w", err)
	}
	self, err := fs.Self()
	if err != nil {
		return KernelDrops{}, fmt.Errorf("kernel drops: %w", err)
	}
	snmp, err := self.Snmp()
	if err != nil {
		return KernelDrops{}, fmt.Errorf("kernel drops: read net/snmp: %w", err)
	}
	netstat, err := self.Netstat()
	if err != nil {
		return KernelDrops{}, fmt.Errorf("kernel drops: read net/netstat: %w", err)
	}
	k := KernelDrops{
		UDPRcvbufErrors: val(snmp.Udp.RcvbufErrors),
		UDPSndbufErrors: val(snmp.Udp.SndbufErrors),
		TCPListenDrops:  val(netstat.TcpExt.ListenDrops),
		TCPBacklogDrops: val(netstat.TcpExt.TCPBacklogDrop),
	}
	// softnet_stat is host-wide and absent in some containers; its absence
	// is not an error worth failing the reading for.
	if soft, err := fs.NetSoftnetStat(); err == nil {
		for _, s := range soft {
			k.SoftnetDropped += float64(s.Dropped)
		}
	}
	return k, nil
}

func val(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
