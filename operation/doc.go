// Package operation runs long operations (a backup of a large database, a
// migration, a resize) beside an operator's passes, recorded in the
// object's status so that an operator restart neither forgets one nor runs
// it twice when it must not.
//
// A Record in the status holds one operation: Start makes it Pending,
// Runner.Step records each attempt (Running, Attempts) in one pass and
// launches it only in a later pass, once that record was written, then
// reports progress and the outcome. A Record found Running after a
// restart was interrupted: Operation.Done says whether it completed,
// otherwise it runs again while MaxAttempts allows, or is Failed with
// ReasonInterrupted. With MaxAttempts 1 an operation runs at most once;
// a Run that returns a Permanent error is not attempted again.
//
// The status write of opkit's Reconciler at the end of each pass is the
// record; with plain controller-runtime, write the status after Step. A
// test that runs passes by hand calls Runner.Wait between them.
package operation
