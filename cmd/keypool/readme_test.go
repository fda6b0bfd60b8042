package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeImports are the packages a README fragment may use without
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

// readmeGivens are the variables a README fragment may use without
// declaring them: what the text around it has set up.
var readmeGivens = []struct{ name, decl string }{
	{"keys", "keys []keypool.Key"},
	{"pool", "pool *keypool.Pool"},
	{"pacific", "pacific *time.Location"},
	{"tp", "tp trace.TracerProvider"},
	{"mp", "mp metric.MeterProvider"},
	{"ctx", "ctx = context.Background()"},
}

// snippet is one Go block of the README.
type snippet struct {
	line int // where its code starts in the README
	code string
}

// readmeSnippets returns the README's Go blocks.
func readmeSnippets(t *testing.T, readme string) []snippet {
	t.Helper()
	var out []snippet
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		require.Less(t, i, len(lines), "README line %d: a Go block that does not end", start)
		out = append(out, snippet{line: start + 1, code: strings.Join(lines[start:i], "\n")})
	}
	return out
}

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

// TestREADMEGoCompiles builds every Go block of the README: a program as
// written, a fragment wrapped in a main. A block that cannot compile says
// so on its first line, with the reason: "// Not compiled: …".
func TestREADMEGoCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the README's Go blocks with the go command")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	snippets := readmeSnippets(t, string(readme))
	require.NotEmpty(t, snippets)

	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	dir := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	where := map[string]snippet{}
	for i, s := range snippets {
		if m := notCompiled.FindStringSubmatch(s.code); m != nil {
			assert.NotEmpty(t, strings.TrimSpace(m[1]), "README line %d: say why the block is not compiled", s.line)
			continue
		}
		src, err := s.program()
		if !assert.NoError(t, err, "README line %d:\n%s", s.line, s.code) {
			continue
		}
		file := filepath.Join(dir, fmt.Sprintf("snippet%d.go", i))
		require.NoError(t, os.WriteFile(file, []byte(src), 0o600))
		// The overlay puts the file in the module, where its imports
		// resolve, without writing there.
		pkg := fmt.Sprintf("zz_readme_snippets/line%d", s.line)
		overlay[filepath.Join(root, pkg, "main.go")] = file
		pkgs = append(pkgs, "./"+pkg)
		where[pkg] = s
	}
	require.NotEmpty(t, pkgs, "no README block is compiled")
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
				t.Errorf("the README's Go block at line %d does not compile:\n%s", s.line, numbered(src))
			}
		}
		t.Fatalf("go build: %v\n%s", err, msg)
	}
	t.Logf("built %d Go blocks of the README", len(pkgs))
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

// TestOneWordForBenched holds the command's code, its page and the
// README's proxy sections to one word for a key or route out of rotation.
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
	_, proxy, ok := strings.Cut(string(readme), "## A key-pooling proxy")
	require.True(t, ok)
	proxy, _, _ = strings.Cut(proxy, "## State that survives restarts")
	texts["README.md (the proxy)"] = proxy
	for name, text := range texts {
		for i, line := range strings.Split(text, "\n") {
			if name != "readme_test.go" && restWords.MatchString(line) {
				t.Errorf("%s:%d says %q: a key or route out of rotation is benched", name, i+1, restWords.FindString(line))
			}
		}
	}
	assert.True(t, restWords.MatchString("the upstream rests until"), "the check can fail")
}
