// Package archtest holds the import rules of ARCHITECTURE.md as a test: each rule names a
// package (and its sub-packages) and the project packages it must never link, and the test
// fails with the offending import chain when one does. It has no code of its own.
package archtest
