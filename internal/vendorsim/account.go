package vendorsim

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// accountState is one account's windows, shared by the keys that name it.
type accountState struct {
	name string
	keys []*keyState // the keys naming the account, in the order of Config.Keys

	// mu guards every field below. A decision takes it after the deciding
	// key's lock, never before.
	mu      sync.Mutex
	last    time.Time // latest time used, so window times never go back
	win     windows
	history []entry      // accepted requests of all its keys: time and total tokens
	cache   *promptCache // the prompt cache its keys share; nil when off
}

// validateAccounts checks the accounts of a configuration against its keys'
// IDs: each has a name that no key has as its ID (SetLimits and the
// counters take either), and no negative limit.
func validateAccounts(accounts map[string]Limits, keys []Key) error {
	ids := make(map[string]bool, len(keys))
	for _, k := range keys {
		id := k.ID
		if id == "" {
			id = k.Secret
		}
		ids[id] = true
	}
	names := make([]string, 0, len(accounts))
	for name := range accounts {
		names = append(names, name)
	}
	slices.Sort(names) // the same configuration always gives the same error
	for _, name := range names {
		switch {
		case name == "":
			return errors.New("vendorsim: Config.Accounts lists an account with an empty name")
		case ids[name]:
			return fmt.Errorf("vendorsim: account %q has the name of a key's ID", name)
		case accounts[name].negative():
			return fmt.Errorf("vendorsim: account %q has a negative limit", name)
		}
	}
	return nil
}

// SetLimits changes, while the server runs, the limits of the key with the
// given ID or of the account with the given name. The next answer is
// decided by the new limits and states them. A window that keeps a limit
// keeps what it counts: under a lower limit it may count more than the
// limit, and refuses until enough of it has left. A window that had no
// limit counted nothing, so it starts counting at the change. A zero field
// removes the limit on that axis.
//
// It returns an error for a negative limit, an unknown ID or name, and a
// key of an account (set the account's limits instead). It is safe to call
// while requests are served.
func (s *Server) SetLimits(id string, l Limits) error {
	if l.negative() {
		return fmt.Errorf("vendorsim: SetLimits(%q): a negative limit", id)
	}
	if a := s.accounts[id]; a != nil {
		a.mu.Lock()
		a.win.setLimits(l)
		a.mu.Unlock()
		return nil
	}
	ks := s.byID[id]
	switch {
	case ks == nil:
		return fmt.Errorf("vendorsim: SetLimits(%q): no key or account has that ID or name", id)
	case ks.account != nil:
		return fmt.Errorf("vendorsim: SetLimits(%q): the key is held to the limits of account %q; set those", id, ks.account.name)
	}
	ks.mu.Lock()
	ks.own.setLimits(l)
	ks.mu.Unlock()
	return nil
}
