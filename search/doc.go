// Package search keeps a full-text index of a seglog store.
package search
