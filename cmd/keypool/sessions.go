package main

import (
	"crypto/rand"
	"crypto/sha256"
	"sync"
	"time"
)

// sessions are the status page's logins, kept in the proxy's memory. A
// session's ID is random (crypto/rand, 128 bits), so that the cookie that
// carries it tells nothing of the operator token it was opened with, and
// no one can make one offline; the proxy keeps a hash of the ID, the token
// and the expiry. A session ends at logout, at its expiry, when its token
// is no longer an operator token, and when the proxy stops: a login holds
// for the process it was made in.
//
// It is safe for concurrent use.
type sessions struct {
	mu   sync.Mutex // guards byID
	byID map[[sha256.Size]byte]session
}

// session is one login: the operator token it was opened with, and when
// it ends.
type session struct {
	token   []byte
	expires time.Time
}

const (
	// sessionLife is how long a status page login lasts.
	sessionLife = 7 * 24 * time.Hour
	// maxSessions bounds the sessions kept: past it, a login ends the
	// one that would end soonest.
	maxSessions = 1024
	// maxSessionID bounds a cookie's value that is looked up.
	maxSessionID = 64
)

// open starts a session for token at now and returns its ID, for the
// cookie, and when it ends.
func (ss *sessions) open(token []byte, now time.Time) (id string, expires time.Time) {
	id, expires = rand.Text(), now.Add(sessionLife)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.byID == nil {
		ss.byID = make(map[[sha256.Size]byte]session)
	}
	if len(ss.byID) >= maxSessions {
		ss.prune(now)
	}
	ss.byID[sha256.Sum256([]byte(id))] = session{token: token, expires: expires}
	return id, expires
}

// prune drops the sessions ended at now, and, while there are still
// maxSessions, the one that would end soonest.
func (ss *sessions) prune(now time.Time) {
	for h, s := range ss.byID {
		if !now.Before(s.expires) {
			delete(ss.byID, h)
		}
	}
	for len(ss.byID) >= maxSessions {
		var soonest [sha256.Size]byte
		var at time.Time
		for h, s := range ss.byID {
			if at.IsZero() || s.expires.Before(at) {
				soonest, at = h, s.expires
			}
		}
		delete(ss.byID, soonest)
	}
}

// token returns the token of the session id at now, and whether there is
// one: not ended, and its token still one that operator reports is
// configured. A session that has ended, or whose token is not, is
// dropped.
func (ss *sessions) token(id string, now time.Time, operator func(token []byte) bool) ([]byte, bool) {
	if id == "" || len(id) > maxSessionID {
		return nil, false
	}
	h := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.byID[h]
	if !ok {
		return nil, false
	}
	if !now.Before(s.expires) || !operator(s.token) {
		delete(ss.byID, h)
		return nil, false
	}
	return s.token, true
}

// close ends the session id, if there is one.
func (ss *sessions) close(id string) {
	if len(id) > maxSessionID {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.byID, sha256.Sum256([]byte(id)))
}
