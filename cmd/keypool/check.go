package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	path, err := configFlag(newFlagSet("check", "keypool check -config FILE",
		"Checks a configuration as keypool serve reads it, without serving: every mistake, one a line, naming\n"+
			"its field as the file writes it, and exit status 2 when there is any. It reads the secrets (env, files),\n"+
			"checks that the state directory is writable or that Redis answers, and starts nothing."), args, stderr)
	if err != nil {
		return err
	}
	s, all := checkConfig(path, false)
	if s != nil {
		for _, w := range s.warnings {
			fmt.Fprintln(stderr, "keypool check: warning: "+w)
		}
	}
	if len(all) > 0 {
		return usageError{all}
	}
	keys := 0
	for _, r := range s.routes {
		keys += len(r.keys)
	}
	state := displayState(s.state)
	switch {
	case isRedisURL(s.state) && redisstore.IsClusterURL(s.state):
		state += " (Redis Cluster)"
	case isRedisURL(s.state):
		state += " (Redis)"
	case s.stateDefault:
		state += " (Badger; the default, as state is not set)"
	default:
		state += " (Badger)"
	}
	fmt.Fprintf(stdout, "%s: no mistakes: %s, %s; state in %s\n", path, count(len(s.routes), "upstream"), count(keys, "key"), state)
	return nil
}

// configFlag parses the flags of a command that reads a configuration:
// -config FILE, which it returns, is required.
func configFlag(fs *flag.FlagSet, args []string, stderr io.Writer) (string, error) {
	path := fs.String("config", "", "the YAML configuration file (required)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return "", err
	}
	if *path == "" {
		return "", usageError{errors.New("-config FILE is required")}
	}
	return *path, nil
}

// checkConfig reads the configuration at path and checks it and its state,
// as check and serve (serving) do before anything starts, and returns the
// settings (nil when the file could not be read as YAML) and every mistake;
// check also says when another process holds the state directory.
func checkConfig(path string, serving bool) (*settings, mistakes) {
	s, err := loadConfig(path, os.LookupEnv)
	var all mistakes
	all.merge(err)
	if s != nil && !(serving && isRedisURL(s.state) && s.replicas > 0) {
		// With replicas, Redis out of reach stops nothing: serve starts on
		// local windows, and logs the outage, without waiting for a
		// check's timeout first.
		all.merge(checkState(s, slog.New(slog.DiscardHandler)))
	}
	if s != nil && !serving && !isRedisURL(s.state) && stateHeld(s.state) {
		// serve finds it so when it opens the store, and says so.
		all.merge(&configError{"state", fmt.Errorf("%s: %w (a running keypool serve or demo): serve would not start on it", s.state, keypool.ErrStoreLocked)})
	}
	return s, all
}

// count says n of a thing: "1 key", "2 keys".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// checkState checks that serve could keep its state where s says, as
// check and serve do before anything starts: a directory it can write to
// (or make), or a Redis server that answers. It returns the mistakes, or
// nil, and adds to s's warnings what would not stop serve: Redis out of
// reach while replicas serve from local windows. It opens nothing that
// lasts: a running proxy may hold the state.
func checkState(s *settings, log *slog.Logger) error {
	if isRedisURL(s.state) {
		down, err := redisAnswers(s.state, log)
		switch {
		case err == nil:
			return nil
		case s.replicas > 0 && down:
			s.warnings = append(s.warnings, fmt.Sprintf("state: %s; serve would start on local windows at 1/%d of every limit until it answers", err, s.replicas))
			return nil
		}
		return mistakes{&configError{"state", err}}
	}
	if err := stateDirWritable(s.state); err != nil {
		return mistakes{&configError{"state", err}}
	}
	return nil
}

// redisAnswers opens the Redis store at state and closes it, and returns
// why it could not be opened — Redis out of reach, within the store's
// timeout of a few seconds, or a plain URL naming a Cluster node — as one
// line, without the URL's password — and whether Redis was out of reach.
// Neither the store nor the Redis client logs while checking: the client
// logs to the debug level of log.
func redisAnswers(state string, log *slog.Logger) (down bool, err error) {
	redis.SetLogger(redisLog{log})
	store, err := redisstore.Open(state, redisstore.WithLogger(slog.New(slog.DiscardHandler)))
	if err == nil {
		err = store.Close()
	}
	if err != nil {
		return errors.Is(err, redisstore.ErrUnavailable), errors.New(withoutPassword(state, oneLine.Replace(err.Error())))
	}
	return false, nil
}

// redisLog is the Redis client's logger: what it logs — each failed dial
// of an outage — goes to the debug level of a slog.Logger. The store says
// when Redis stops and starts answering.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, args ...any) {
	l.log.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, args...))
}

// stateDirWritable returns why serve could not keep its state in dir: it
// is not a directory, or neither it nor — when it does not exist yet — the
// directory that would hold it can be written to. It writes a file there
// and removes it, and makes nothing: opening the store would make the
// directory and its database, and fail while a running proxy holds it.
func stateDirWritable(dir string) error {
	at := dir
	for {
		st, err := os.Stat(at)
		if err == nil {
			if !st.IsDir() {
				if at == dir {
					return fmt.Errorf("%s is not a directory", dir)
				}
				return fmt.Errorf("%s cannot be made: %s is not a directory", dir, at)
			}
			break
		}
		parent := filepath.Dir(at)
		if !(errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) || parent == at {
			return fmt.Errorf("%s: %v", dir, pathErr(err))
		}
		at = parent
	}
	f, err := os.CreateTemp(at, ".keypool-check-*")
	if err != nil {
		if at == dir {
			return fmt.Errorf("%s is not writable: %v", dir, pathErr(err))
		}
		return fmt.Errorf("%s cannot be made: %s is not writable: %v", dir, at, pathErr(err))
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	return nil
}

// pathErr returns the cause of a *fs.PathError, whose text repeats the
// path.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
