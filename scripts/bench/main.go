// Command bench runs keypool's performance benchmarks and prints one table
// of the ratios the project's goals are stated in, each against its goal.
// Machines are shared and noisy, so every figure is a ratio of two things
// measured in the same run, and each is the median of several runs.
//
// It also measures keypool serve against a plain reverse proxy
// (scripts/bench/proxy, as processes of their own) and prints how a
// request's cost grows with keys, models, accounts and goroutines.
//
//	go run ./scripts/bench                 # about fifteen minutes
//	go run ./scripts/bench -count 3        # quicker, noisier
//	go run ./scripts/bench -proxy=false    # without the proxy's processes
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// result holds the measurements of one benchmark, a value a run.
type result map[string][]float64 // unit ("ns/op", "allocs/op", "%served") → values

var line = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// run runs the benchmarks matching pattern in pkg count times and returns
// their results by name.
func run(pkg, pattern string, count int) (map[string]result, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", pattern, "-benchmem", "-count", strconv.Itoa(count), pkg)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	fmt.Fprintf(os.Stderr, "running %s in %s ×%d\n", pattern, pkg, count)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", pattern, err, out.String())
	}
	results := map[string]result{}
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
	return results, nil
}

// median returns the median of a benchmark's values in a unit.
func median(rs map[string]result, name, unit string) float64 {
	v := slices.Clone(rs[name][unit])
	if len(v) == 0 {
		fmt.Fprintf(os.Stderr, "no %s for %s\n", unit, name)
		return 0
	}
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
	count := flag.Int("count", 6, "runs of each benchmark; the table shows medians")
	withProxy := flag.Bool("proxy", true, "measure keypool serve against a plain reverse proxy too (scripts/bench/proxy)")
	flag.Parse()
	all := map[string]result{}
	for _, b := range []struct {
		pkg, pattern string
		count        int
	}{
		{".", "^BenchmarkOverhead$", *count},
		{".", "^BenchmarkScaling$", *count},
		{".", "^BenchmarkWindowSetMemory$", 1},
		{".", "^BenchmarkLoopback$", *count},
		{".", "^BenchmarkGoodput$", 1},
		{".", "^BenchmarkStores$", *count},
		{"./redisstore", "^BenchmarkTake$", *count},
	} {
		rs, err := run(b.pkg, b.pattern, b.count)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for k, v := range rs {
			all[k] = v
		}
	}
	var rows []row
	ratio := func(a, b string, unit string) float64 { return median(all, a, unit) / median(all, b, unit) }
	for _, p := range []string{"false", "true"} {
		mode := map[string]string{"false": "serial", "true": "16 goroutines"}[p]
		pool, floor := "BenchmarkOverhead/pool/parallel="+p, "BenchmarkOverhead/floor/parallel="+p
		r := ratio(pool, floor, "ns/op")
		rows = append(rows, row{"1. overhead per request, " + mode, fmt.Sprintf("%.2f× the floor", r), "≤ 2.0× (goal 1.5×)", check(r <= 2.0)})
		extra := median(all, pool, "allocs/op") - median(all, floor, "allocs/op")
		rows = append(rows, row{"1. allocations per request, " + mode, fmt.Sprintf("%+.0f over the floor", extra), "≤ +3", check(extra <= 3)})
		q := ratio("BenchmarkOverhead/pool-requests/parallel="+p, floor, "ns/op")
		rows = append(rows, row{"   the same with request limits only (no token metering), " + mode, fmt.Sprintf("%.2f× the floor", q), "", nil})
		o := ratio("BenchmarkOverhead/oauth2/parallel="+p, floor, "ns/op")
		rows = append(rows, row{"   x/oauth2 Transport, " + mode + " (reference)", fmt.Sprintf("%.2f× the floor", o), "", nil})
	}
	k := ratio(shape(10_000, 1, 0, 1), shape(1, 1, 0, 1), "ns/op")
	rows = append(rows, row{"2. 10,000 keys against 1", fmt.Sprintf("%.2f×", k), "≤ 1.2×", check(k <= 1.2)})
	m := ratio(shape(1, 100, 0, 1), shape(1, 1, 0, 1), "ns/op")
	rows = append(rows, row{"2. 100 models against 1", fmt.Sprintf("%.2f×", m), "≤ 1.2×", check(m <= 1.2)})
	rows = append(rows, row{"2. memory per key × model window set", fmt.Sprintf("%.0f B", median(all, "BenchmarkWindowSetMemory", "B/set")), "≤ 1 KiB of windows", nil})
	l := ratio("BenchmarkLoopback/fixed", "BenchmarkLoopback/pool", "ns/op")
	rows = append(rows, row{"3. throughput on loopback against one fixed key", fmt.Sprintf("%.2f×", l), "≥ 0.9×", check(l >= 0.9)})
	served := median(all, "BenchmarkGoodput/pool", "%served")
	rows = append(rows, row{"4. goodput: share of the keys' capacity served", fmt.Sprintf("%.1f%%", served), "≥ 98%", check(served >= 98)})
	e429 := median(all, "BenchmarkGoodput/pool", "%429")
	rows = append(rows, row{"4. vendor 429s, limits configured", fmt.Sprintf("%.2f%% of sent", e429), "0", check(e429 == 0)})
	room := median(all, "BenchmarkGoodput/pool", "failed-with-room")
	rows = append(rows, row{"4. calls failed while a key had room at the vendor", fmt.Sprintf("%.0f of 6000 calls", room), "≤ 10 (goal 0)", check(room <= 10)})
	rows = append(rows, row{"   naive round-robin: served, vendor 429s", fmt.Sprintf("%.1f%%, %.1f%% of sent",
		median(all, "BenchmarkGoodput/naive", "%served"), median(all, "BenchmarkGoodput/naive", "%429")), "", nil})
	bg := ratio("BenchmarkStores/badger", "BenchmarkStores/memory", "ns/op")
	rows = append(rows, row{"5. Badger store hot path against memory", fmt.Sprintf("%.2f×", bg), "≤ 1.2×", check(bg <= 1.2)})
	for _, mode := range []string{"serial", "parallel"} {
		redis := "BenchmarkTake/redis/" + mode
		if _, ok := all[redis]; !ok {
			continue // no redis-server here
		}
		rd := ratio(redis, "BenchmarkTake/memory/"+mode, "ns/op")
		rows = append(rows, row{"5. Redis store against memory, take and settle, " + mode, fmt.Sprintf("%.0f×, %.2f round trips a request",
			rd, median(all, redis, "roundtrips/op")), "1 round trip", check(median(all, redis, "roundtrips/op") <= 1.01)})
	}
	if *withProxy {
		proxyRows, err := proxyGoals(*count)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		rows = append(rows, proxyRows...)
	}

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

// shape names BenchmarkScaling's sub-benchmark for a pool of keys keys,
// models models, accounts accounts and goroutines goroutines.
func shape(keys, models, accounts, goroutines int) string {
	return fmt.Sprintf("BenchmarkScaling/keys=%d/models=%d/accounts=%d/goroutines=%d", keys, models, accounts, goroutines)
}

// growth prints how a request's cost grows with each of BenchmarkScaling's
// dimensions, against the same pool with one of it (one key, one model, no
// accounts, one goroutine; 1,000 keys for accounts, 100 for goroutines).
// A row within 1.2× of its base is flat.
func growth(all map[string]result) {
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOW COST GROWS\tNS/REQUEST\tAGAINST ONE\tALLOCS\t")
	line := func(label, name, base string) {
		ns, b := median(all, name, "ns/op"), median(all, base, "ns/op")
		flat := "flat"
		if ns > 1.2*b {
			flat = "grows"
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f×\t%.0f\t%s\n", label, ns, ns/b, median(all, name, "allocs/op"), flat)
	}
	for _, n := range []int{1, 10, 100, 1_000, 10_000, 100_000} {
		line(fmt.Sprintf("keys %d", n), shape(n, 1, 0, 1), shape(1, 1, 0, 1))
	}
	for _, n := range []int{1, 10, 100, 1_000} {
		line(fmt.Sprintf("models %d (1 key)", n), shape(1, n, 0, 1), shape(1, 1, 0, 1))
	}
	for _, n := range []int{1, 10, 100, 1_000} {
		line(fmt.Sprintf("accounts %d (1,000 keys)", n), shape(1_000, 1, n, 1), shape(1_000, 1, 0, 1))
	}
	for _, n := range []int{1, 4, 16, 64, 256} {
		line(fmt.Sprintf("goroutines %d (100 keys)", n), shape(100, 1, 0, n), shape(100, 1, 0, 1))
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
