// Package keypool turns several API keys for one vendor into one dependable
// client.
package keypool
