//go:build tools

package tools

import _ "github.com/tilt-dev/tilt/cmd/tilt"
