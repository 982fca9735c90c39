// Package conversiontest checks an API's hub-and-spoke conversion
// (controller-runtime's conversion.Hub and conversion.Convertible): an
// object filled at random, converted to the other version and back, must
// come back unchanged, both ways. Fields one version lacks must travel
// through the other, usually in an annotation.
//
//	func TestConversion(t *testing.T) {
//		conversiontest.RoundTrip(t, &v1beta1.Memcached{}, &v1alpha1.Memcached{})
//	}
package conversiontest
