package errprefix

import (
	"errors"
	"io/fs"
	"testing"
)

func TestLines(t *testing.T) {
	inner := errors.Join(errors.New("a: bad"), fs.ErrNotExist)
	err := Lines("f.yaml", inner)
	if got, want := err.Error(), "f.yaml: a: bad\nf.yaml: file does not exist"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the chain is lost")
	}
	if Lines("x", nil) != nil {
		t.Fatal("a nil error became one")
	}
}
