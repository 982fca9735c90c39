package controller

// RetentionRetry is retentionRetry, for the tests of package controller_test.
const RetentionRetry = retentionRetry
