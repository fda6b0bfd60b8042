// Command bench runs keypool's performance benchmarks and prints one table
// of the ratios the project's goals are stated in, each against its goal.
// Machines are shared and noisy, so every figure is a ratio of two things
// measured in the same round, seconds apart, and each is the median of
// several rounds' ratios.
//
// It also measures keypool serve against a plain reverse proxy
// (scripts/bench/proxy, as processes of their own) and prints how a
// request's cost grows with keys, models, accounts and goroutines.
//
//	go run ./scripts/bench                 # about ten minutes on 2 cores
//	go run ./scripts/bench -count 3        # quicker, noisier
//	go run ./scripts/bench -proxy=false    # without the proxy's processes
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// result holds the measurements of one benchmark, a value a run.
type result map[string][]float64 // unit ("ns/op", "allocs/op", "%served") → values

var line = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// run runs the benchmarks matching pattern in the test binary bin, from
// the package's directory dir, rounds times one after the other, and
// returns their results by name: value i of each is round i's, so that
// two benchmarks of one round, run seconds apart, compare with one another
// rather than with another round, on a machine whose speed wanders by a
// third from one minute to the next.
func run(bin, dir, pattern string, rounds int) (map[string]result, error) {
	fmt.Fprintf(os.Stderr, "running %s in %s, %d rounds\n", pattern, dir, rounds)
	results := map[string]result{}
	for range rounds {
		cmd := exec.Command(bin, "-test.run", "^$", "-test.bench", pattern, "-test.benchmem", "-test.count", "1")
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s: %v\n%s", pattern, err, out.String())
		}
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			m := line.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			r := results[m[1]]
			if r == nil {
				r = result{}
				results[m[1]] = r
			}
			f := strings.Fields(m[2])
			for i := 0; i+1 < len(f); i += 2 {
				if v, err := strconv.ParseFloat(f[i], 64); err == nil {
					r[f[i+1]] = append(r[f[i+1]], v)
				}
			}
		}
	}
	return results, nil
}

// build compiles the tests of the package in dir into a binary in tmp,
// so that each round runs the same binary, and returns its path.
func build(dir, tmp string) (string, error) {
	bin := filepath.Join(tmp, strings.NewReplacer("/", "_", ".", "_").Replace(dir)+".test")
	cmd := exec.Command("go", "test", "-c", "-o", bin, ".")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the benchmarks of %s: %v", dir, err)
	}
	return bin, nil
}

// median returns the median of a benchmark's values in a unit.
func median(rs map[string]result, name, unit string) float64 {
	return med(rs[name][unit], name+" "+unit)
}

// ratio returns the median, over the rounds, of benchmark a's value in a
// unit over benchmark b's in the same round.
func ratio(rs map[string]result, a, b, unit string) float64 {
	x, y := rs[a][unit], rs[b][unit]
	r := make([]float64, min(len(x), len(y)))
	for i := range r {
		r[i] = x[i] / y[i]
	}
	return med(r, a+" / "+b+" "+unit)
}

func med(v []float64, what string) float64 {
	if len(v) == 0 {
		fmt.Fprintf(os.Stderr, "no %s\n", what)
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// row is one line of the table.
type row struct {
	goal, measured, target string
	pass                   *bool // nil: reported, no goal
}

func check(ok bool) *bool { return &ok }

func main() {
	count := flag.Int("count", 6, "rounds of each benchmark; the table shows medians, of each round's ratio for a ratio")
	withProxy := flag.Bool("proxy", true, "measure keypool serve against a plain reverse proxy too (scripts/bench/proxy)")
	flag.Parse()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	all, err := measure(*count)
	if err != nil {
		fail(err)
	}
	rows := goals(all)
	if *withProxy {
		proxyRows, err := proxyGoals(*count)
		if err != nil {
			fail(err)
		}
		rows = append(rows, proxyRows...)
	}
	rows = append(rows, growthGoals(all)...)
	rows = append(rows, earlierGoals(all)...)
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GOAL\tMEASURED\tTARGET\tRESULT")
	for _, r := range rows {
		verdict := ""
		if r.pass != nil {
			verdict = map[bool]string{true: "pass", false: "FAIL"}[*r.pass]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.goal, r.measured, r.target, verdict)
	}
	tw.Flush()
	fmt.Println()
	growth(all)
}

// measure builds and runs every benchmark the table needs, count rounds
// of each (one of those that report no time), its binaries in a directory
// of its own that it removes.
func measure(count int) (map[string]result, error) {
	tmp, err := os.MkdirTemp("", "keypool-bench")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	all := map[string]result{}
	bins := map[string]string{}
	for _, b := range []struct {
		dir, pattern string
		rounds       int
	}{
		{".", "^BenchmarkOverhead$", count},
		{".", "^BenchmarkScaling$", count},
		{".", "^BenchmarkWindowSetMemory$", 1},
		{".", "^BenchmarkGoodput$", 1},
		{".", "^BenchmarkLoopback$", count},
		{".", "^BenchmarkStores$", count},
		{"redisstore", "^BenchmarkTake$", count},
	} {
		if bins[b.dir] == "" {
			bin, err := build(b.dir, tmp)
			if err != nil {
				return nil, err
			}
			bins[b.dir] = bin
		}
		rs, err := run(bins[b.dir], b.dir, b.pattern, b.rounds)
		if err != nil {
			return nil, err
		}
		maps.Copy(all, rs)
	}
	return all, nil
}

// goals returns the rows of the performance goals 1 and 2: the overhead of
// a request against the floor, and no call refused while a key has room,
// the limit never passed.
func goals(all map[string]result) []row {
	var rows []row
	for _, p := range []string{"false", "true"} {
		mode := map[string]string{"false": "serial", "true": "16 goroutines"}[p]
		pool, floor := "BenchmarkOverhead/pool/parallel="+p, "BenchmarkOverhead/floor/parallel="+p
		r := ratio(all, pool, floor, "ns/op")
		rows = append(rows, row{"1. overhead per request, " + mode, fmt.Sprintf("%.2f× the floor", r), "≤ 2.0× (goal 1.5×)", check(r <= 2.0)})
		extra := median(all, pool, "allocs/op") - median(all, floor, "allocs/op")
		rows = append(rows, row{"1. allocations per request, " + mode, fmt.Sprintf("%+.0f over the floor", extra), "≤ +3", check(extra <= 3)})
		q := ratio(all, "BenchmarkOverhead/pool-requests/parallel="+p, floor, "ns/op")
		rows = append(rows, row{"   the same with request limits only (no token metering), " + mode, fmt.Sprintf("%.2f× the floor", q), "", nil})
		o := ratio(all, "BenchmarkOverhead/oauth2/parallel="+p, floor, "ns/op")
		rows = append(rows, row{"   x/oauth2 Transport, " + mode + " (reference)", fmt.Sprintf("%.2f× the floor", o), "", nil})
	}
	room := median(all, "BenchmarkGoodput/pool", "failed-with-room")
	rows = append(rows, row{"2. calls failed while a key had room at the vendor", fmt.Sprintf("%.0f of 6000 calls", room), "0", check(room == 0)})
	guard := median(all, "BenchmarkGoodput/pool", "failed-in-guard")
	rows = append(rows, row{"   the same within the 5 ms guard past a window's span (ExactGuard)", fmt.Sprintf("%.0f of 6000 calls", guard), "≤ 10, one a minute", check(guard <= 10)})
	e429 := median(all, "BenchmarkGoodput/pool", "%429")
	rows = append(rows, row{"2. vendor 429s, limits configured (the limit never passed)", fmt.Sprintf("%.2f%% of sent", e429), "0", check(e429 == 0)})
	served := median(all, "BenchmarkGoodput/pool", "%served")
	rows = append(rows, row{"2. goodput: share of the keys' capacity served", fmt.Sprintf("%.1f%%", served), "≥ 98%", check(served >= 98)})
	rows = append(rows, row{"   naive round-robin: served, vendor 429s", fmt.Sprintf("%.1f%%, %.1f%% of sent",
		median(all, "BenchmarkGoodput/naive", "%served"), median(all, "BenchmarkGoodput/naive", "%429")), "", nil})
	rows = append(rows, row{"2. memory per key × model window set, with its entries", fmt.Sprintf("%.0f B", median(all, "BenchmarkWindowSetMemory", "B/set")), "≤ 1 KiB of windows (TestWindowSetFitsInOneKiB)", nil})
	return rows
}

// growthGoals returns goal 4's rows: where the cost of a request stops
// being flat in each dimension, measured to its largest size.
func growthGoals(all map[string]result) []row {
	var rows []row
	for _, d := range dimensions() {
		largest := d.rows[len(d.rows)-1]
		rows = append(rows, row{"4. how cost grows with " + d.name, flatUpTo(all, d),
			fmt.Sprintf("measured to %d (table below)", largest.size), check(len(all[largest.name]["ns/op"]) > 0)})
	}
	return rows
}

// earlierGoals returns the rows of goals that earlier issues set and met,
// kept in the table so that a change that breaks one shows.
func earlierGoals(all map[string]result) []row {
	k := ratio(all, shape(10_000, 1, 0, 1), shape(1, 1, 0, 1), "ns/op")
	m := ratio(all, shape(1, 100, 0, 1), shape(1, 1, 0, 1), "ns/op")
	l := ratio(all, "BenchmarkLoopback/fixed", "BenchmarkLoopback/pool", "ns/op")
	bg := ratio(all, "BenchmarkStores/badger", "BenchmarkStores/memory", "ns/op")
	rows := []row{
		{"earlier: 10,000 keys against 1", fmt.Sprintf("%.2f×", k), "≤ 1.2×", check(k <= 1.2)},
		{"earlier: 100 models against 1", fmt.Sprintf("%.2f×", m), "≤ 1.2×", check(m <= 1.2)},
		{"earlier: throughput on loopback against one fixed key", fmt.Sprintf("%.2f×", l), "≥ 0.9×", check(l >= 0.9)},
		{"earlier: Badger store hot path against memory", fmt.Sprintf("%.2f×", bg), "≤ 1.2×", check(bg <= 1.2)},
	}
	for _, mode := range []string{"serial", "parallel"} {
		redis := "BenchmarkTake/redis/" + mode
		if _, ok := all[redis]; !ok {
			continue // no redis-server here
		}
		rd := ratio(all, redis, "BenchmarkTake/memory/"+mode, "ns/op")
		rows = append(rows, row{"earlier: Redis store against memory, take and settle, " + mode, fmt.Sprintf("%.0f×, %.2f round trips a request",
			rd, median(all, redis, "roundtrips/op")), "1 round trip", check(median(all, redis, "roundtrips/op") <= 1.01)})
	}
	return rows
}

// shape names BenchmarkScaling's sub-benchmark for a pool of keys keys,
// models models, accounts accounts and goroutines goroutines.
func shape(keys, models, accounts, goroutines int) string {
	return fmt.Sprintf("BenchmarkScaling/keys=%d/models=%d/accounts=%d/goroutines=%d", keys, models, accounts, goroutines)
}

// dimension is one thing BenchmarkScaling grows, its rows from the least.
type dimension struct {
	name string
	rows []growthRow
}

// growthRow is one size of a dimension: its benchmark and the one it is
// held against (the same pool with one key, one model, no account, one
// goroutine; 1,000 keys for accounts, 100 for goroutines).
type growthRow struct {
	label, name, base string
	size              int
}

func dimensions() []dimension {
	var keys, models, accounts, goroutines []growthRow
	for _, n := range []int{1, 10, 100, 1_000, 10_000, 100_000} {
		keys = append(keys, growthRow{fmt.Sprintf("keys %d", n), shape(n, 1, 0, 1), shape(1, 1, 0, 1), n})
	}
	for _, n := range []int{1, 10, 100, 1_000} {
		models = append(models, growthRow{fmt.Sprintf("models %d (1 key)", n), shape(1, n, 0, 1), shape(1, 1, 0, 1), n})
		accounts = append(accounts, growthRow{fmt.Sprintf("accounts %d (1,000 keys)", n), shape(1_000, 1, n, 1), shape(1_000, 1, 0, 1), n})
	}
	for _, n := range []int{1, 4, 16, 64, 256} {
		goroutines = append(goroutines, growthRow{fmt.Sprintf("goroutines %d (100 keys)", n), shape(100, 1, 0, n), shape(100, 1, 0, 1), n})
	}
	return []dimension{{"keys", keys}, {"models", models}, {"accounts", accounts}, {"goroutines", goroutines}}
}

// flatWithin is how far above its base a row may cost and still be flat.
const flatWithin = 1.2

// flatUpTo says where a dimension stops being flat: the largest size up to
// which every row is within flatWithin of its base, and the first beyond.
func flatUpTo(all map[string]result, d dimension) string {
	for i, r := range d.rows {
		if x := ratio(all, r.name, r.base, "ns/op"); x > flatWithin {
			if i == 0 {
				return fmt.Sprintf("grows from %d (%.2f×)", r.size, x)
			}
			return fmt.Sprintf("flat to %d, %.2f× at %d", d.rows[i-1].size, x, r.size)
		}
	}
	return fmt.Sprintf("flat to %d", d.rows[len(d.rows)-1].size)
}

// growth prints how a request's cost grows with each of BenchmarkScaling's
// dimensions, against its base; a row within flatWithin of it is flat.
func growth(all map[string]result) {
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOW COST GROWS\tNS/REQUEST\tAGAINST ONE\tALLOCS\t")
	for _, d := range dimensions() {
		for _, r := range d.rows {
			x := ratio(all, r.name, r.base, "ns/op")
			flat := "flat"
			if x > flatWithin {
				flat = "grows"
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%.2f×\t%.0f\t%s\n", r.label, median(all, r.name, "ns/op"), x, median(all, r.name, "allocs/op"), flat)
		}
	}
	tw.Flush()
}

// proxyGoals runs scripts/bench/proxy for its goals — keypool serve
// against a plain reverse proxy, as processes of their own — with rounds
// rounds, and returns them as rows.
func proxyGoals(rounds int) ([]row, error) {
	cmd := exec.Command("go", "run", "./scripts/bench/proxy", "-before", "", "-tsv", "-runs", strconv.Itoa(max(rounds/2, 3)))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	fmt.Fprintln(os.Stderr, "running scripts/bench/proxy")
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("scripts/bench/proxy: %v", err)
	}
	var rows []row
	for l := range strings.Lines(out.String()) {
		f := strings.Split(strings.TrimSuffix(l, "\n"), "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("scripts/bench/proxy: a line that is not a goal: %q", l)
		}
		r := row{goal: "3. " + f[0], measured: f[1], target: f[2]}
		if f[3] != "" {
			r.pass = check(f[3] == "pass")
		}
		rows = append(rows, r)
	}
	return rows, nil
}
