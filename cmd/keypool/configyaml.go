package main

import (
	"bytes"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The configuration file is decoded here, node by node, rather than by
// yaml.v3's decoder, so that every mistake is found in one pass and named by
// its path as the file writes it — upstreams[1].limit, not "field limit not
// found in type main.upstream" — with its line.

// Bounds of what the decoding walks: a file of aliases that refer to each
// other (a "billion laughs") or to themselves ends at these.
const (
	maxAliasDepth = 16
	maxYAMLNodes  = 1 << 16
)

// yamlDecoder decodes a document node into a config, noting each mistake.
type yamlDecoder struct {
	mistakes *mistakes
	nodes    int // nodes visited, at most maxYAMLNodes
	aliases  int // the depth of aliases being followed
	stopped  bool
}

// decodeYAML decodes the YAML document data into c and returns every
// mistake it finds: a syntax error (then nothing else), or unknown fields,
// values of the wrong type and keys given twice, each named by its path.
func decodeYAML(data []byte, c *config, name string) mistakes {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// yaml lists its complaints a line each; the command says one line.
		msg := strings.Join(strings.Fields(strings.TrimPrefix(err.Error(), "yaml: ")), " ")
		return mistakes{fieldErr("config", "%s: %s", name, problemAt(data, msg))}
	}
	var m mistakes
	if doc.Kind == 0 { // nothing but blanks and comments
		m.add(&configError{field: "config", err: fmt.Errorf("%s is empty: a configuration sets at least proxy_tokens and upstreams (docs/proxy.md)", name)})
		return m
	}
	d := &yamlDecoder{mistakes: &m}
	d.value(doc.Content[0], reflect.ValueOf(c).Elem(), "")
	return m
}

// yamlLine is the line yaml.v3 names at the start of a syntax error.
var yamlLine = regexp.MustCompile(`^line ([0-9]+): `)

// maxLocatedLines bounds the lines of a file problemAt reads again.
const maxLocatedLines = 5000

// problemAt returns yaml.v3's syntax error msg about data with the line at
// which data stops being YAML. For a block that goes wrong — a line
// indented less or more than its neighbours — yaml names the line where
// the block starts, often far above: the line here is the first of the
// last lines each of which ends a part of data that fails to parse.
func problemAt(data []byte, msg string) string {
	m := yamlLine.FindStringSubmatch(msg)
	if m == nil || bytes.Count(data, []byte("\n")) > maxLocatedLines {
		return msg
	}
	said, _ := strconv.Atoi(m[1])
	var ends []int // ends[i] is the end of line i+1, its newline included
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	fails := func(lines int) bool {
		var doc yaml.Node
		return yaml.Unmarshal(data[:ends[lines-1]], &doc) != nil
	}
	line := len(ends)
	for line > 1 && fails(line-1) {
		line--
	}
	if line <= said {
		return msg
	}
	return fmt.Sprintf("line %d: %s (is the line indented as it should be?)", line, msg[len(m[0]):])
}

func (d *yamlDecoder) fail(n *yaml.Node, path, format string, args ...any) {
	if path == "" {
		path = "config"
	}
	d.mistakes.add(&configError{field: path, err: fmt.Errorf(format+" (line %d)", append(args, n.Line)...)})
}

// value decodes node n into v, whose path in the file is path.
func (d *yamlDecoder) value(n *yaml.Node, v reflect.Value, path string) {
	if d.stopped {
		return
	}
	if d.nodes++; d.nodes > maxYAMLNodes {
		d.stopped = true
		d.fail(n, "config", "more than %d values: is it a configuration file?", maxYAMLNodes)
		return
	}
	if n.Kind == yaml.AliasNode {
		if d.aliases >= maxAliasDepth {
			d.stopped = true
			d.fail(n, path, "aliases nested over %d deep", maxAliasDepth)
			return
		}
		d.aliases++
		d.value(n.Alias, v, path)
		d.aliases--
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // left at its zero value: the default
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(n, v.Elem(), path)
	case reflect.Struct:
		d.structValue(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, path, "want a list, not %s", nodeKind(n))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content)))
		for i, item := range n.Content {
			d.value(item, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		d.mapValue(n, v, path)
	default:
		d.scalar(n, v, path)
	}
}

// structValue decodes a mapping into the struct v by its fields' yaml
// tags, merging in what a "<<" key names.
func (d *yamlDecoder) structValue(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping of settings, not %s", nodeKind(n))
		return
	}
	fields := yamlFields(v.Type())
	seen := map[string]int{} // the line of each key given
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		if key.Tag == "!!merge" {
			d.merge(val, v, path)
			continue
		}
		name := key.Value
		fieldPath := mapPath(path, name)
		if line, dup := seen[name]; dup {
			d.fail(key, fieldPath, "given twice (first at line %d)", line)
			continue
		}
		seen[name] = key.Line
		index, ok := fields[name]
		if !ok {
			msg := "unknown field"
			if near := nearest(name, fields); near != "" {
				msg += "; did you mean " + near + "?"
			}
			d.fail(key, fieldPath, "%s", msg)
			continue
		}
		d.value(val, v.Field(index), fieldPath)
	}
}

// merge decodes the mappings a "<<" key names into v, before the keys
// written beside it, which override them.
func (d *yamlDecoder) merge(n *yaml.Node, v reflect.Value, path string) {
	for depth := 0; n.Kind == yaml.AliasNode; depth++ {
		if depth == maxAliasDepth {
			d.stopped = true
			d.fail(n, path, "aliases nested over %d deep", maxAliasDepth)
			return
		}
		n = n.Alias
	}
	if n.Kind == yaml.SequenceNode {
		for _, m := range n.Content {
			d.value(m, v, path)
		}
		return
	}
	d.value(n, v, path)
}

// mapValue decodes a mapping into the map v, whose keys are strings.
func (d *yamlDecoder) mapValue(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping, not %s", nodeKind(n))
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		if key.Kind != yaml.ScalarNode {
			d.fail(key, path, "a key that is %s: want a name", nodeKind(key))
			continue
		}
		entry := mapPath(path, key.Value)
		if line, dup := seen[key.Value]; dup {
			d.fail(key, entry, "given twice (first at line %d)", line)
			continue
		}
		seen[key.Value] = key.Line
		elem := reflect.New(v.Type().Elem()).Elem()
		d.value(val, elem, entry)
		v.SetMapIndex(reflect.ValueOf(key.Value), elem)
	}
}

// scalar decodes a scalar node into v: a string, a whole number, a number
// or a boolean.
func (d *yamlDecoder) scalar(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want a single value, not %s", nodeKind(n))
		return
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		switch v.Kind() {
		case reflect.Int, reflect.Int64:
			d.fail(n, path, "%s is not a whole number", strconv.Quote(n.Value))
		case reflect.Bool:
			d.fail(n, path, "%s is not true or false", strconv.Quote(n.Value))
		case reflect.Float64:
			d.fail(n, path, "%s is not a number such as 2.5", strconv.Quote(n.Value))
		default:
			d.fail(n, path, "%s is not a %s", strconv.Quote(n.Value), v.Kind())
		}
	}
}

// nodeKind names a node's kind for a message.
func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// yamlFields returns the index of each field of a struct type by its yaml
// name.
func yamlFields(t reflect.Type) map[string]int {
	fields := map[string]int{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			fields[name] = i
		}
	}
	return fields
}

// joinPath returns the path of field name under path.
func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// plainKey matches a map key a path can show as it is: model_limits.gpt-4o.
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// mapPath returns the path of a map's entry: path.key, or path["key"] for a
// key with dots, slashes or anything else a path would misread.
func mapPath(path, key string) string {
	if plainKey.MatchString(key) {
		return joinPath(path, key)
	}
	if len(key) > 64 {
		key = strings.ToValidUTF8(key[:64], "") + "…"
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// nearest returns the known field names closest to name, when they are
// near enough to be what was meant — at most two edits away — as "rpd or
// rpm"; "" when none is.
func nearest(name string, fields map[string]int) string {
	var best []string
	bestDist := 3
	for f := range fields {
		switch d := editDistance(strings.ToLower(name), f); {
		case d < bestDist:
			best, bestDist = []string{f}, d
		case d == bestDist:
			best = append(best, f)
		}
	}
	slices.Sort(best)
	return strings.Join(best, " or ")
}

// editDistance returns the Levenshtein distance between a and b; names
// longer than 64 bytes are taken as far apart.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
