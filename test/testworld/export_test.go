package testworld

// Abandon leaves the node as a killed test binary would: the kernel kills
// the kubelet and containerd (their parent died), the lock is released,
// and the shims, containers, mounts, cgroups and bridges stay.
func (n *RealNode) Abandon() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopped = true
	_ = n.kubelet.kill()
	_ = n.containerd.kill()
	if n.relay != nil {
		n.relay.close()
	}
	unlockRealNode(n.lock)
}

// ShimsRunning counts the containerd shims of real nodes still running.
func ShimsRunning() int {
	dir, err := NodeDir()
	if err != nil {
		return 0
	}
	return len(processesByExe(dir + "/bin/" + binShim))
}
