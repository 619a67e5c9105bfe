// Package docs holds the pages under docs/ and the test that keeps the repository's documentation
// honest: TestDocBlocks runs every code block of README.md, the SDK READMEs, the conformance
// hosts' READMEs, plugins/AUTHORING.md and docs/*.md as written, in a clean copy of the
// repository, against a real `pctl serve`. The conventions a page follows are in docs/README.md.
package docs
