// Package testapi holds custom resource types used only by opkit's own tests.
//
// They exist so that the library's envtest suites exercise a real custom
// resource with a status subresource, CEL validation and conditions, the way a
// user's operator would. Nothing outside opkit's tests should import it.
package testapi
