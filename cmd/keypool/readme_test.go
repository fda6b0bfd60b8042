package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeImports are the packages a fragment of the docs may use without
// importing them, by the name it uses.
var readmeImports = map[string]string{
	"context":       "context",
	"errors":        "errors",
	"fmt":           "fmt",
	"http":          "net/http",
	"io":            "io",
	"log":           "log",
	"os":            "os",
	"strings":       "strings",
	"time":          "time",
	"keypool":       "github.com/keypool-go/keypool",
	"redisstore":    "github.com/keypool-go/keypool/redisstore",
	"openai":        "github.com/openai/openai-go/v3",
	"option":        "github.com/openai/openai-go/v3/option",
	"retryablehttp": "github.com/hashicorp/go-retryablehttp",
	"otelhttp":      "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp",
	"trace":         "go.opentelemetry.io/otel/trace",
	"metric":        "go.opentelemetry.io/otel/metric",
}

// readmeGivens are the variables a fragment of the docs may use without
// declaring them: what the text around it has set up.
var readmeGivens = []struct{ name, decl string }{
	{"keys", "keys []keypool.Key"},
	{"pool", "pool *keypool.Pool"},
	{"pacific", "pacific *time.Location"},
	{"tp", "tp trace.TracerProvider"},
	{"mp", "mp metric.MeterProvider"},
	{"ctx", "ctx = context.Background()"},
}

// snippet is one Go block of the docs.
type snippet struct {
	file string // the document, from the repository's root
	line int    // where its code starts in the document
	code string
}

// readmeSnippets returns the Go blocks of the document text, file.
func readmeSnippets(t *testing.T, file, text string) []snippet {
	t.Helper()
	var out []snippet
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		require.Less(t, i, len(lines), "%s line %d: a Go block that does not end", file, start)
		out = append(out, snippet{file: file, line: start + 1, code: strings.Join(lines[start:i], "\n")})
	}
	return out
}

// where names the block's place: its document and line.
func (s snippet) where() string { return fmt.Sprintf("%s line %d", s.file, s.line) }

// notCompiled matches the first line of a block that says why it is not
// compiled, where a reader sees it.
var notCompiled = regexp.MustCompile(`^// Not compiled: *(.*)`)

// program returns s as a program: as written when it is one, else wrapped
// in a main with the imports and the given variables it uses, each
// variable it declares used once.
func (s snippet) program() (string, error) {
	if strings.HasPrefix(strings.TrimSpace(s.code), "package ") {
		return s.code, nil
	}
	wrap := func(uses []string) string {
		var b strings.Builder
		b.WriteString("package main\n\nfunc main() {\n")
		for _, g := range readmeGivens {
			if regexp.MustCompile(`\b` + g.name + `\b`).MatchString(s.code) {
				fmt.Fprintf(&b, "\tvar %s\n\t_ = %s\n", g.decl, g.name)
			}
		}
		b.WriteString("\t{\n" + s.code + "\n")
		for _, u := range uses {
			fmt.Fprintf(&b, "\t\t_ = %s\n", u)
		}
		b.WriteString("\t}\n}\n")
		return b.String()
	}
	src := wrap(nil)
	f, err := parser.ParseFile(token.NewFileSet(), "snippet.go", src, parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	// The fragment is the block inside main, after the givens.
	body := f.Decls[0].(*ast.FuncDecl).Body.List
	block := body[len(body)-1].(*ast.BlockStmt)
	var declared []string
	for _, st := range block.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					if id, ok := e.(*ast.Ident); ok && id.Name != "_" {
						declared = append(declared, id.Name)
					}
				}
			}
		case *ast.DeclStmt:
			if gd, ok := st.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, sp := range gd.Specs {
					for _, id := range sp.(*ast.ValueSpec).Names {
						declared = append(declared, id.Name)
					}
				}
			}
		}
	}
	src = wrap(declared)
	// Imports: the known packages the program names and does not declare.
	f, err = parser.ParseFile(token.NewFileSet(), "snippet.go", src, 0)
	if err != nil {
		return "", err
	}
	var imports []string
	for _, id := range f.Unresolved {
		if p, ok := readmeImports[id.Name]; ok && !slices.Contains(imports, p) {
			imports = append(imports, p)
		}
	}
	slices.Sort(imports)
	var imp strings.Builder
	imp.WriteString("package main\n\nimport (\n")
	for _, p := range imports {
		fmt.Fprintf(&imp, "\t%q\n", p)
	}
	imp.WriteString(")\n")
	return strings.Replace(src, "package main\n", imp.String(), 1), nil
}

// TestREADMEGoCompiles builds every Go block of the README and of
// docs/*.md: a program as written, a fragment wrapped in a main. A block
// that cannot compile says so on its first line, with the reason: "// Not
// compiled: …".
func TestREADMEGoCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the docs' Go blocks with the go command")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root := repoRoot(t)
	var snippets []snippet
	perFile := map[string]int{}
	for _, file := range docFiles(t, root) {
		text, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		s := readmeSnippets(t, file, string(text))
		perFile[file] = len(s)
		snippets = append(snippets, s...)
	}
	require.NotZero(t, perFile["README.md"], "the README has Go blocks")

	dir := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	where := map[string]snippet{}
	for i, s := range snippets {
		if m := notCompiled.FindStringSubmatch(s.code); m != nil {
			assert.NotEmpty(t, strings.TrimSpace(m[1]), "%s: say why the block is not compiled", s.where())
			continue
		}
		src, err := s.program()
		if !assert.NoError(t, err, "%s:\n%s", s.where(), s.code) {
			continue
		}
		file := filepath.Join(dir, fmt.Sprintf("snippet%d.go", i))
		require.NoError(t, os.WriteFile(file, []byte(src), 0o600))
		// The overlay puts the file in the module, where its imports
		// resolve, without writing there.
		pkg := fmt.Sprintf("zz_readme_snippets/%s/line%d", strings.NewReplacer("/", "_", ".", "_").Replace(s.file), s.line)
		overlay[filepath.Join(root, pkg, "main.go")] = file
		pkgs = append(pkgs, "./"+pkg)
		where[pkg] = s
	}
	require.NotEmpty(t, pkgs, "no Go block of the docs is compiled")
	o, err := json.Marshal(map[string]any{"Replace": overlay})
	require.NoError(t, err)
	overlayFile := filepath.Join(dir, "overlay.json")
	require.NoError(t, os.WriteFile(overlayFile, o, 0o600))

	cmd := exec.CommandContext(t.Context(), goTool, append([]string{"build", "-overlay", overlayFile}, pkgs...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := string(out)
		for pkg, s := range where {
			if strings.Contains(msg, "# github.com/keypool-go/keypool/"+pkg+"\n") {
				src, _ := s.program()
				t.Errorf("the Go block at %s does not compile:\n%s", s.where(), numbered(src))
			}
		}
		t.Fatalf("go build: %v\n%s", err, msg)
	}
	t.Logf("built %d Go blocks of the docs (per document, compiled or not: %v)", len(pkgs), perFile)
}

func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%3d  %s\n", i+1, l)
	}
	return b.String()
}

// restWords are the words STYLE.md rule 13 keeps out: a key or a route out
// of rotation is benched.
var restWords = regexp.MustCompile(`(?i)\b(rests|resting|rested|a rest)\b`)

// TestOneWordForBenched holds the command's code, its page, the README's
// proxy section and docs/proxy.md to one word for a key or route out of
// rotation.
func TestOneWordForBenched(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	web, err := filepath.Glob("web/*")
	require.NoError(t, err)
	texts := map[string]string{}
	for _, f := range append(files, web...) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		texts[f] = string(b)
	}
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, proxy, ok := strings.Cut(string(readme), "\n## A key-pooling proxy")
	require.True(t, ok)
	proxy, _, _ = strings.Cut(proxy, "\n## ")
	texts["README.md (the proxy)"] = proxy
	proxyDoc, err := os.ReadFile("../../docs/proxy.md")
	require.NoError(t, err)
	texts["docs/proxy.md"] = string(proxyDoc)
	for name, text := range texts {
		for i, line := range strings.Split(text, "\n") {
			if name != "readme_test.go" && restWords.MatchString(line) {
				t.Errorf("%s:%d says %q: a key or route out of rotation is benched", name, i+1, restWords.FindString(line))
			}
		}
	}
	assert.True(t, restWords.MatchString("the upstream rests until"), "the check can fail")
}

// repoRoot returns the repository's root: this package is cmd/keypool.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	return root
}

// docFiles returns the documents, relative to the root, whose words the
// docs' tests read: README.md, BENCHMARKS.md, RELIABILITY.md and docs/*.md.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md", "BENCHMARKS.md", "RELIABILITY.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, m := range more {
		rel, err := filepath.Rel(root, m)
		require.NoError(t, err)
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

// testName matches the name of a test, a fuzz test or a benchmark.
var testName = regexp.MustCompile(`\b(Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*`)

// goTestPattern matches a go test flag whose value is a pattern of test
// names, and the value: quoted, or up to a space or a backquote.
var goTestPattern = regexp.MustCompile("-(?:test\\.)?(?:run|bench|fuzz)(?:=|\\s+)('[^']*'|\"[^\"]*\"|[^\\s`]+)")

// namedTest is a test a document names.
type namedTest struct {
	name   string
	line   int  // in the document
	prefix bool // named in a pattern, so any test whose name starts with it
}

// namedTests returns the tests, fuzz tests and benchmarks doc names. A
// name in prose is a test's whole name. A name in the pattern of a -run,
// -bench or -fuzz flag is a regexp that go test matches unanchored, so it
// names every test whose name starts with it (TestPriority names
// TestPriorityOrder) — unless a $ ends it there. The pattern is read as
// go test reads it: a / starts a subtest's part, which is not checked; |
// separates alternatives (\| too, as a Markdown table escapes it), and a
// group's alternatives are each spelled out (TestA(B|C) names TestAB and
// TestAC); a ^ is dropped.
func namedTests(doc string) []namedTest {
	var out []namedTest
	for i, line := range strings.Split(doc, "\n") {
		rest := goTestPattern.ReplaceAllStringFunc(line, func(flag string) string {
			p := goTestPattern.FindStringSubmatch(flag)[1]
			p = strings.Trim(p, `'"`)
			p = strings.ReplaceAll(p, `\|`, "|")
			p, _ = cutTopLevel(p, '/')
			for _, alt := range alternatives(p) {
				alt = strings.TrimLeft(alt, "^")
				if name := testName.FindString(alt); name != "" && strings.HasPrefix(alt, name) {
					out = append(out, namedTest{name: name, line: i + 1, prefix: !strings.HasPrefix(alt[len(name):], "$")})
				}
			}
			return " "
		})
		for _, name := range testName.FindAllString(rest, -1) {
			out = append(out, namedTest{name: name, line: i + 1})
		}
	}
	return out
}

// cutTopLevel cuts p around its first sep outside parentheses.
func cutTopLevel(p string, sep byte) (before, after string) {
	depth := 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '(':
			depth++
		case ')':
			depth--
		case sep:
			if depth == 0 {
				return p[:i], p[i+1:]
			}
		}
	}
	return p, ""
}

// alternatives spells out the alternatives of the regexp p: its parts
// between | outside parentheses, each group's alternatives put in turn.
func alternatives(p string) []string {
	var out []string
	for {
		part, rest := cutTopLevel(p, '|')
		out = append(out, expandGroup(part)...)
		if len(part) == len(p) {
			return out
		}
		p = rest
	}
}

// expandGroup spells out the first group of part, and so on.
func expandGroup(part string) []string {
	open := strings.IndexByte(part, '(')
	if open < 0 {
		return []string{part}
	}
	depth := 0
	for i := open; i < len(part); i++ {
		switch part[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				var out []string
				inner := strings.TrimPrefix(part[open+1:i], "?:")
				for _, alt := range alternatives(inner) {
					out = append(out, expandGroup(part[:open]+alt+part[i+1:])...)
				}
				return out
			}
		}
	}
	return []string{part} // a group that does not end: as written
}

// declaredTests returns the test, fuzz test and benchmark functions of
// every _test.go file under root, outside .git and testdata, whatever its
// build constraints say.
func declaredTests(t *testing.T, root string) map[string]bool {
	t.Helper()
	declared := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && testName.MatchString(fd.Name.Name) {
				declared[fd.Name.Name] = true
			}
		}
		return nil
	})
	require.NoError(t, err)
	return declared
}

// missingTests returns the tests doc names that declared does not hold.
func missingTests(doc string, declared map[string]bool) []namedTest {
	var missing []namedTest
	for _, n := range namedTests(doc) {
		found := declared[n.name]
		if n.prefix && !found {
			for d := range declared {
				if strings.HasPrefix(d, n.name) {
					found = true
					break
				}
			}
		}
		if !found {
			missing = append(missing, n)
		}
	}
	return missing
}

// TestDocsNameOnlyTestsThatExist holds every test, fuzz test and benchmark
// the docs name to a function some _test.go file of the module declares,
// so that a renamed or merged test does not leave its claim in the docs
// pointing at nothing. A name in prose must be a function's whole name. A
// name in the pattern of go test's -run, -bench or -fuzz exists when some
// function's name starts with it: go test matches the pattern as a regexp,
// unanchored, so `-run TestPriority` runs TestPriorityOrder (a $ after the
// name asks for the whole name). Of a pattern, only the top-level names
// are checked, not a /subtest part; namedTests says how one is read.
func TestDocsNameOnlyTestsThatExist(t *testing.T) {
	root := repoRoot(t)
	declared := declaredTests(t, root)
	require.True(t, declared["TestDocsNameOnlyTestsThatExist"], "the declared tests include this one")
	named := 0
	for _, file := range docFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		named += len(namedTests(string(b)))
		for _, m := range missingTests(string(b), declared) {
			t.Errorf("%s:%d names %s, but no test is so named", file, m.line, m.name)
		}
	}
	assert.NotZero(t, named, "the docs name tests")

	// The check can fail, and reads patterns as go test does.
	known := map[string]bool{"TestPriorityOrder": true, "TestAB": true, "BenchmarkX": true}
	for doc, want := range map[string][]string{
		"TestPriorityOrder and BenchmarkX":                           nil,
		"see TestPriority":                                           {"TestPriority"},
		"`go test -run TestPriority .`":                              nil,
		"`go test -run '^TestPriority$' .`":                          {"TestPriority"},
		"`go test -run '^TestPriorityOrder$' .`":                     nil,
		"`go test -run 'TestA(B|C)/sub' .`":                          {"TestAC"},
		"| `go test -run 'TestAB\\|TestNone' -bench=BenchmarkY .` |": {"TestNone", "BenchmarkY"},
		"`go test -run 'TestAB/TestNone' .`":                         nil,
	} {
		var got []string
		for _, m := range missingTests(doc, known) {
			got = append(got, m.name)
		}
		assert.Equal(t, want, got, "missing tests of %q", doc)
	}
}

// readmeMaxWords is the most words the README may hold: what keypool is
// and how to start, the rest in docs/.
const readmeMaxWords = 4000

// TestReadmeIsShort keeps the README at most readmeMaxWords words, counted
// as wc -w counts them: runs of characters between white space.
func TestReadmeIsShort(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	words := len(strings.Fields(string(readme)))
	assert.LessOrEqual(t, words, readmeMaxWords,
		"README.md has %d words: move what a first reading does not need to docs/", words)
}

// mdLink matches a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// outsideCode returns the lines of a Markdown text with those of its
// fenced blocks blanked, so that a comment in a block is not a heading.
func outsideCode(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
		} else if fenced {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives a Markdown text's
// headings: lower case, without punctuation but - and _, a space a -, and
// -1, -2… after a repeated one.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range outsideCode(text) {
		heading := strings.TrimLeft(l, "#")
		if len(heading) == len(l) || !strings.HasPrefix(heading, " ") {
			continue
		}
		a := headingAnchor(heading)
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// headingAnchor returns the anchor GitHub gives a heading's text.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDocsLinksResolve holds every relative link of the docs to a file of
// the repository, and a link to a heading of a Markdown file to one it has.
func TestDocsLinksResolve(t *testing.T) {
	root := repoRoot(t)
	assert.Equal(t, "stopping-and-health", headingAnchor(" Stopping, and health"))
	assert.Equal(t, "the-proxy-keypool-serve", headingAnchor("The proxy: `keypool serve`"))
	links := 0
	for _, file := range docFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		for i, line := range outsideCode(string(b)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, anchor, _ := strings.Cut(target, "#")
				to := filepath.Join(root, filepath.Dir(file), filepath.FromSlash(path))
				if path == "" {
					to = filepath.Join(root, file)
				}
				rel, err := filepath.Rel(root, to)
				if err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s:%d links to %s, outside the repository", file, i+1, target)
					continue
				}
				text, err := os.ReadFile(to)
				if errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s:%d links to %s, which does not exist", file, i+1, target)
					continue
				}
				if anchor == "" || !strings.HasSuffix(to, ".md") {
					continue
				}
				require.NoError(t, err)
				if !headingAnchors(string(text))[anchor] {
					t.Errorf("%s:%d links to %s, a heading %s does not have", file, i+1, target, rel)
				}
			}
		}
	}
	assert.NotZero(t, links, "the docs have relative links")
}

// TestReadmeFirstCommands: the README's first command runs the demo and its
// second runs the tests, as a new reader types them.
func TestReadmeFirstCommands(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	var commands []string
	inShell := false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inShell = true
		case strings.HasPrefix(line, "```"):
			inShell = false
		case inShell && strings.TrimSpace(line) != "":
			cmd, _, _ := strings.Cut(line, "#")
			commands = append(commands, strings.TrimSpace(cmd))
		}
	}
	require.GreaterOrEqual(t, len(commands), 2, "the README's shell commands")
	assert.Equal(t, []string{"go run ./cmd/keypool demo", "go test ./..."}, commands[:2])
}
