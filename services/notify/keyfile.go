package main

import (
	"fmt"
	"os"
	"syscall"
)

// checkKeyFile refuses a private key file that others can read, naming
// the setting that points at it — as Postgres does for its server key: a
// file owned by the process's user must not be readable by its group or
// others (0600 or less), and one owned by root may be group-readable (0640
// or less), as Kubernetes mounts a Secret for a pod's fsGroup.
func checkKeyFile(setting, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("invalid %s: %w", setting, err)
	}
	mode := fi.Mode().Perm()
	rootOwned := false
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		rootOwned = st.Uid == 0
	}
	switch {
	case mode&0o007 != 0:
		return fmt.Errorf("%s %s is readable by others (mode %#o): it holds a private key; chmod 600 it", setting, path, mode)
	case mode&0o070 != 0 && !rootOwned:
		return fmt.Errorf("%s %s is readable by its group (mode %#o): it holds a private key; chmod 600 it (a root-owned file may be 640)", setting, path, mode)
	}
	return nil
}
