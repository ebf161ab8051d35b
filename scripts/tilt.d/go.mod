// Wrapper module that pins Tilt for scripts/tilt. Tilt's own go.mod replaces three modules;
// replace directives of a dependency do not apply to a wrapper, so they are repeated here.
module alnair.local/tiltbuild

go 1.26

require github.com/tilt-dev/tilt v0.33.21 // indirect

replace github.com/emicklei/go-restful/v3 => github.com/emicklei/go-restful/v3 v3.9.0

replace github.com/pkg/browser => github.com/tilt-dev/browser v0.0.1

replace k8s.io/apimachinery => github.com/tilt-dev/apimachinery v0.31.0-tilt-20240902
