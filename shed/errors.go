package shed

import "errors"

// ErrInvalidConfig is wrapped by every error that Validate and the
// constructors return for a bad configuration; the message names the field.
var ErrInvalidConfig = errors.New("shed: invalid config")
