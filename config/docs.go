package config

import (
	_ "embed"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// configSource is this package's config.go: the doc comments of Config's fields are the
// documentation of the keys, printed by TOML, so they are written once.
//
//go:embed config.go
var configSource string

// keyDocs maps each TOML key of Config to the doc comment of its field, as lines.
var keyDocs = sync.OnceValue(func() map[string][]string {
	docs := map[string][]string{}
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", configSource, parser.ParseComments)
	if err != nil {
		return docs // TOML falls back to the one-line help
	}
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.TypeSpec)
		if !ok || spec.Name.Name != "Config" {
			return true
		}
		st, ok := spec.Type.(*ast.StructType)
		if !ok {
			return false
		}
		var pending []string // a comment group shared by consecutive fields
		for _, field := range st.Fields.List {
			if field.Tag == nil {
				continue
			}
			tag, err := strconv.Unquote(field.Tag.Value)
			if err != nil {
				continue
			}
			key, _, _ := strings.Cut(reflect.StructTag(tag).Get("toml"), ",")
			if field.Doc != nil {
				pending = strings.Split(strings.TrimSpace(field.Doc.Text()), "\n")
				// "CacheTTL is ..." reads "cache_ttl is ..." in the file.
				if len(field.Names) == 1 {
					if rest, ok := strings.CutPrefix(pending[0], field.Names[0].Name+" "); ok {
						pending[0] = key + " " + rest
					}
				}
			}
			docs[key] = pending
		}
		return false
	})
	return docs
})
