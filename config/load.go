package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Load builds the configuration from the defaults, the TOML file at path,
// the environment (CRIJOURNAL_<KEY>) and the flags of flags that BindFlags
// registered and that were set, each overriding the one before; then it
// validates the result.
//
// An empty path means DefaultFile, which may be missing (then only the
// defaults, the environment and the flags count). Any other path must name
// an existing file. flags may be nil.
//
// Errors about keys and values are *KeyError values (several joined with
// errors.Join) that say where the value came from.
func Load(path string, flags *pflag.FlagSet) (Config, error) {
	if path == "" {
		return load(DefaultFile, false, flags)
	}
	return load(path, true, flags)
}

// BindFlags registers on fs one flag per scalar key of Config, named after
// the key with "-" for "_" (--cache-ttl for cache_ttl), with the key's
// default. Runtime handlers have no flags. Pass fs to Load to apply the
// flags that were set.
func BindFlags(fs *pflag.FlagSet) {
	def := reflect.ValueOf(Default())
	for _, f := range scalarFields {
		usage := fmt.Sprintf("%s [%s]", f.help, f.env)
		switch d := def.Field(f.index).Interface().(type) {
		case string:
			fs.String(f.flag, d, usage)
		case bool:
			fs.Bool(f.flag, d, usage)
		case time.Duration:
			fs.Duration(f.flag, d, usage)
		case int:
			fs.Int(f.flag, d, usage)
		case int64:
			fs.Int64(f.flag, d, usage)
		case []string:
			fs.StringSlice(f.flag, d, usage)
		default:
			panic(fmt.Sprintf("config: key %s has unsupported type %T", f.key, d))
		}
	}
}

func load(path string, mustExist bool, flags *pflag.FlagSet) (Config, error) {
	file, err := readFile(path, mustExist)
	if err != nil {
		return Config{}, err
	}
	src := sources{path: path, file: file, flags: flags}

	v := viper.New()
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(envReplacer)
	v.AllowEmptyEnv(true)
	v.AutomaticEnv()
	def := Default()
	defValue := reflect.ValueOf(def)
	for _, f := range scalarFields {
		v.SetDefault(f.key, defValue.Field(f.index).Interface())
		if flags == nil {
			continue
		}
		if fl := flags.Lookup(f.flag); fl != nil {
			if err := v.BindPFlag(f.key, fl); err != nil {
				return Config{}, fmt.Errorf("bind flag --%s: %w", f.flag, err)
			}
		}
	}
	for name, rt := range def.Runtimes {
		v.SetDefault("runtimes."+name+".path", rt.Path)
		v.SetDefault("runtimes."+name+".root", rt.Root)
	}
	if file != nil {
		// MergeConfigMap lower-cases keys in place: give it a copy, so
		// that error messages keep the keys as written.
		// Registries are read from file directly (registriesOf): keep
		// viper's case folding away from them.
		merged := copyMap(file)
		delete(merged, "registries")
		if err := v.MergeConfigMap(merged); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", path, err)
		}
	}

	var c Config
	var errs []error
	cv := reflect.ValueOf(&c).Elem()
	for _, f := range scalarFields {
		if err := decode(v.Get(f.key), cv.Field(f.index).Addr().Interface()); err != nil {
			errs = append(errs, &KeyError{Key: f.key, Source: src.of(f.key), Err: err})
		}
	}
	c.Runtimes = make(map[string]Runtime)
	for _, name := range runtimeNames(def, file) {
		var rt Runtime
		// A name that is not a DNS label (Validate rejects it) may hold the
		// key delimiter: do not look it up.
		if handlerName.MatchString(name) {
			for _, k := range []struct {
				key string
				dst *string
			}{{"runtimes." + name + ".path", &rt.Path}, {"runtimes." + name + ".root", &rt.Root}} {
				raw := v.Get(k.key)
				if raw == nil {
					continue // not set: empty
				}
				if err := decode(raw, k.dst); err != nil {
					errs = append(errs, &KeyError{Key: k.key, Source: src.of(k.key), Err: err})
				}
			}
		}
		c.Runtimes[name] = rt
	}
	regs, regErrs := registriesOf(file, path)
	c.Registries = regs
	errs = append(errs, regErrs...)
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}

	if err := c.Validate(); err != nil {
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var ke *KeyError
			if errors.As(e, &ke) {
				ke.Source = src.of(ke.Key)
			}
		}
		return Config{}, err
	}
	return c, nil
}

// readFile parses the TOML file at path and checks that it has only known
// keys. A missing file gives a nil map unless mustExist.
func readFile(path string, mustExist bool) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !mustExist {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	var m map[string]any
	if err := toml.Unmarshal(data, &m); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("config file %s:%d:%d: %w", path, row, col, err)
		}
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if m == nil {
		m = map[string]any{}
	}
	if err := checkKeys(path, m); err != nil {
		return nil, err
	}
	return m, nil
}

// checkKeys reports each key of the file m that Config does not have, and
// a runtimes entry that is not a table of tables.
func checkKeys(path string, m map[string]any) error {
	known := make(map[string]bool, len(scalarFields))
	for _, f := range scalarFields {
		known[f.key] = true
	}
	var errs []error
	bad := func(key string, err error) {
		errs = append(errs, &KeyError{Key: key, Source: path, Err: err})
	}
	for _, key := range sortedKeys(m) {
		if known[key] {
			continue
		}
		if key == "registries" {
			continue // checked by registriesOf
		}
		if key != "runtimes" {
			bad(key, ErrUnknownKey)
			continue
		}
		handlers, ok := m[key].(map[string]any)
		if !ok {
			bad(key, fmt.Errorf("want tables [runtimes.<handler>], got %s", describe(m[key])))
			continue
		}
		for _, name := range sortedKeys(handlers) {
			hkey := "runtimes." + name
			table, ok := handlers[name].(map[string]any)
			if !ok {
				bad(hkey, fmt.Errorf("want a table [%s] with path and root, got %s", hkey, describe(handlers[name])))
				continue
			}
			for _, k := range sortedKeys(table) {
				if k != "path" && k != "root" {
					bad(hkey+"."+k, ErrUnknownKey)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// registriesOf decodes the [[registries]] tables of the file m: each a
// table with keys prefix and location (strings) and insecure (a boolean).
// No entries give nil.
func registriesOf(m map[string]any, path string) ([]Registry, []error) {
	raw, ok := m["registries"]
	if !ok {
		return nil, nil
	}
	var errs []error
	bad := func(key string, err error) {
		errs = append(errs, &KeyError{Key: key, Source: path, Err: err})
	}
	list, ok := raw.([]any)
	if !ok {
		bad("registries", fmt.Errorf("want an array of tables [[registries]] with prefix, location and insecure, got %s", describe(raw)))
		return nil, errs
	}
	var regs []Registry
	for i, item := range list {
		key := fmt.Sprintf("registries[%d]", i)
		table, ok := item.(map[string]any)
		if !ok {
			bad(key, fmt.Errorf("want a table [[registries]] with prefix, location and insecure, got %s", describe(item)))
			continue
		}
		var r Registry
		for _, k := range sortedKeys(table) {
			var err error
			switch k {
			case "prefix":
				err = decode(table[k], &r.Prefix)
			case "location":
				err = decode(table[k], &r.Location)
			case "insecure":
				if _, isBool := table[k].(bool); !isBool {
					err = fmt.Errorf("want true or false, got %s", describe(table[k]))
				} else {
					err = decode(table[k], &r.Insecure)
				}
			default:
				err = ErrUnknownKey
			}
			if err != nil {
				bad(key+"."+k, err)
			}
		}
		regs = append(regs, r)
	}
	return regs, errs
}

// copyMap returns a copy of m and of the tables nested in it.
func copyMap(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = copyMap(sub)
		}
		c[k] = v
	}
	return c
}

// runtimeNames returns the handler names of the defaults and of the file,
// sorted.
func runtimeNames(def Config, file map[string]any) []string {
	names := sortedKeys(def.Runtimes)
	if handlers, ok := file["runtimes"].(map[string]any); ok {
		for name := range handlers {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	return names
}

// decode stores raw, a value from viper (the file, the environment, a flag
// or a default), in dst, a pointer to a field of Config.
func decode(raw any, dst any) error {
	switch p := dst.(type) {
	case *string:
		s, ok := raw.(string)
		if !ok {
			return fmt.Errorf("want a string, got %s", describe(raw))
		}
		*p = s
	case *bool:
		switch r := raw.(type) {
		case bool:
			*p = r
		case string:
			b, err := strconv.ParseBool(r)
			if err != nil {
				return fmt.Errorf("want true or false, got %q", r)
			}
			*p = b
		default:
			return fmt.Errorf("want true or false, got %s", describe(raw))
		}
	case *time.Duration:
		switch r := raw.(type) {
		case time.Duration:
			*p = r
		case string:
			d, err := time.ParseDuration(r)
			if err != nil {
				return fmt.Errorf("invalid duration %q: want a number with a unit, such as \"90s\" or \"5m\"", r)
			}
			*p = d
		default:
			return fmt.Errorf("want a duration string such as \"90s\" or \"5m\", got %s", describe(raw))
		}
	case *int:
		n, err := decodeInt(raw)
		if err != nil {
			return err
		}
		if int64(int(n)) != n {
			return fmt.Errorf("integer %d is out of range", n)
		}
		*p = int(n)
	case *int64:
		n, err := decodeInt(raw)
		if err != nil {
			return err
		}
		*p = n
	case *[]string:
		switch r := raw.(type) {
		case []string:
			*p = slices.Clone(r)
		case []any:
			list := make([]string, len(r))
			for i, item := range r {
				s, ok := item.(string)
				if !ok {
					return fmt.Errorf("want an array of strings, item %d is %s", i, describe(item))
				}
				list[i] = s
			}
			*p = list
		case string:
			// From the environment: comma-separated.
			list := []string{}
			for s := range strings.SplitSeq(r, ",") {
				if s = strings.TrimSpace(s); s != "" {
					list = append(list, s)
				}
			}
			*p = list
		default:
			return fmt.Errorf("want an array of strings, got %s", describe(raw))
		}
	default:
		panic(fmt.Sprintf("config: cannot decode into %T", dst))
	}
	return nil
}

// decodeInt reads an integer: from the file, a flag or a default as a number, from the
// environment as decimal text.
func decodeInt(raw any) (int64, error) {
	switch r := raw.(type) {
	case int:
		return int64(r), nil
	case int64:
		return r, nil
	case int32:
		return int64(r), nil
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(r), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("want an integer, got %q", r)
		}
		return n, nil
	}
	return 0, fmt.Errorf("want an integer, got %s", describe(raw))
}

// describe names the TOML type of a decoded value, with the value.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "nothing"
	case string:
		return fmt.Sprintf("string %q", v)
	case int64, int:
		return fmt.Sprintf("integer %v", v)
	case float64:
		return fmt.Sprintf("float %v", v)
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("%T %v", v, v)
}

// sources tells where the value of a key came from, for error messages.
type sources struct {
	path  string         // the configuration file
	file  map[string]any // its contents; nil when it was missing
	flags *pflag.FlagSet
}

func (s sources) of(key string) string {
	if s.flags != nil && !strings.Contains(key, ".") {
		if fl := s.flags.Lookup(strings.ReplaceAll(key, "_", "-")); fl != nil && fl.Changed {
			return "flag --" + fl.Name
		}
	}
	if strings.HasPrefix(key, "registries[") {
		if _, ok := s.file["registries"]; ok {
			return s.path // registries come from the file only
		}
		return ""
	}
	if _, ok := os.LookupEnv(envName(key)); ok {
		return "environment variable " + envName(key)
	}
	var node any = s.file
	for part := range strings.SplitSeq(key, ".") {
		m, ok := node.(map[string]any)
		if !ok {
			return ""
		}
		if node, ok = m[part]; !ok {
			return ""
		}
	}
	return s.path
}
