package fleet

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// fdMargin covers the fleet's own files: listeners, the metrics server,
// stdio, the capture.
const fdMargin = 64

// checkOpenFiles refuses a run whose connections cannot all be open at
// once, before a single one is made, instead of failing logins halfway
// with EMFILE. Go raises the soft limit to the hard one at start-up, so
// the soft limit read here is what the process really has.
func checkOpenFiles(clients int) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read the open-file limit: %w", err)
	}
	need := uint64(clients + fdMargin)
	if need <= lim.Cur {
		return nil
	}
	return badf("--clients %d needs about %d open files but this process may open %d (hard limit %d); raise it with `ulimit -n %d` in the shell that starts replay (a hard limit needs root: /etc/security/limits.conf or prlimit)",
		clients, need, lim.Cur, lim.Max, need)
}
