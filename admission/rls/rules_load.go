package rls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fairgate/fairgate/internal/errprefix"
)

// Loader reads envoyproxy/ratelimit config files into Rules. The zero
// value loads as envoyproxy/ratelimit does by default: each domain in one
// file.
type Loader struct {
	// MergeDomains lets several files configure one domain, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true does: each file adds
	// its top-level descriptors to the domain's, in the order the files
	// are read (which orders the wildcards among them, see Matching). A
	// descriptor configured in two files (same key and value at the top
	// level) is still an error: files add descriptors, they do not patch
	// them. False (the default) refuses a domain's second file.
	MergeDomains bool
}

// LoadRules reads every config file at paths with the zero Loader.
func LoadRules(paths []string) (*Rules, error) { return Loader{}.Load(paths) }

// ParseRules compiles config files with the zero Loader: a domain may
// appear in one file only.
func ParseRules(srcs ...Source) (*Rules, error) { return Loader{}.Parse(srcs...) }

// Loader returns the Loader of c's settings (rls.merge_domain_config).
func (c Config) Loader() Loader { return Loader{MergeDomains: c.MergeDomainConfig} }

// LoadRules reads c.Configs with c's settings.
func (c Config) LoadRules() (*Rules, error) { return c.Loader().Load(c.Configs) }

// Load reads every config file at paths, in order: a file is read whatever
// its name; a folder's *.yaml and *.yml files are read, by name (not its
// subfolders, nor dotfiles such as Kubernetes' ..data swap folders).
// Errors name the file and the field; every error is reported, not only
// the first.
func (l Loader) Load(paths []string) (*Rules, error) {
	var files []string
	var errs []error
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("rls: %w", err))
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p) // sorted by name
		if err != nil {
			errs = append(errs, fmt.Errorf("rls: %w", err))
			continue
		}
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				continue
			}
			fp := filepath.Join(p, n)
			if st, err := os.Stat(fp); err == nil && !st.IsDir() {
				files = append(files, fp)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	srcs := make([]Source, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("rls: %w", err))
			continue
		}
		srcs = append(srcs, Source{Name: f, Data: b})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return l.Parse(srcs...)
}

// Source is one config file's name (for errors) and content.
type Source struct {
	Name string
	Data []byte
}

// Parse compiles config files, in order. Errors name the file and the
// field; every file's errors are reported.
func (l Loader) Parse(srcs ...Source) (*Rules, error) {
	r := &Rules{domains: make(map[string]*level)}
	from := make(map[string]string) // domain → the first file of it
	var errs []error
	for _, s := range srcs {
		f, err := parseFile(s.Data)
		if err != nil {
			errs = append(errs, prefixLines(s.Name, err))
			continue
		}
		lvl := r.domains[f.Domain]
		switch {
		case lvl == nil:
			lvl = &level{tag: domainTag(f.Domain)}
		case !l.MergeDomains:
			errs = append(errs, fmt.Errorf("%s: domain: %q is already configured in %s: give each file its own domain, or set rls.merge_domain_config: true to merge the files of one domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true)", s.Name, f.Domain, from[f.Domain]))
			lvl = &level{} // compiled for the file's own errors, then dropped
		}
		if err := compileFile(f, lvl, s.Name); err != nil {
			errs = append(errs, prefixLines(s.Name, err))
			continue
		}
		if _, ok := r.domains[f.Domain]; !ok {
			r.domains[f.Domain], from[f.Domain] = lvl, s.Name
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

// prefixLines puts "name: " before each line of err's message, keeping
// err (errprefix.Lines).
func prefixLines(name string, err error) error { return errprefix.Lines(name, err) }
