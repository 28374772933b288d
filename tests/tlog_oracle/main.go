// Command tlog_oracle checks `agentteam-replay prove --json` output with Go's own
// golang.org/x/mod/sumdb/note and sumdb/tlog: an implementation this project did not write.
//
//	tlog_oracle check VKEYS FILE  signature (VKEYS: verifier keys, comma-separated), origin, size
//	                              and root of every checkpoint named,
//	                              every inclusion and consistency proof; exit 0 when all hold
//	tlog_oracle roots HEX...      the tree hash of each prefix of the leaves given (RFC 6962)
//	tlog_oracle proofs HEX...     every inclusion and consistency proof of that tree
//	tlog_oracle cosigned VKEY WKEY FILE
//	                              a checkpoint note with a witness's cosignature line: the log's
//	                              signature (sumdb/note, VKEY) and the c2sp.org/tlog-cosignature
//	                              cosignature/v1 line under WKEY (a type 0x04 vkey), checked
//	                              with crypto/ed25519 on the spec's bytes; prints "ok SIZE TIME"
//
// Built offline with GOPATH=/usr/share/gocode GO111MODULE=off go build.
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type event struct {
	LeafIndex int64    `json:"leaf_index"`
	Leaf      string   `json:"leaf"`
	Proof     []string `json:"inclusion_proof"`
}

type document struct {
	Origin     string `json:"origin"`
	TreeSize   *int64 `json:"tree_size"`
	RootHash   string `json:"root_hash"`
	Checkpoint string `json:"checkpoint"`
	event
	Events        []event  `json:"events"`
	OldSize       int64    `json:"old_size"`
	NewSize       int64    `json:"new_size"`
	OldRoot       string   `json:"old_root"`
	NewRoot       string   `json:"new_root"`
	Consistency   []string `json:"consistency_proof"`
	OldCheckpoint *string  `json:"old_checkpoint"`
	NewCheckpoint *string  `json:"new_checkpoint"`
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "tlog_oracle: "+format+"\n", args...)
	os.Exit(1)
}

func hash(text string) tlog.Hash {
	raw, err := base64.StdEncoding.DecodeString(text)
	if err != nil || len(raw) != tlog.HashSize {
		fail("not a base64 SHA-256 hash: %q", text)
	}
	var h tlog.Hash
	copy(h[:], raw)
	return h
}

func hashes(texts []string) []tlog.Hash {
	out := make([]tlog.Hash, len(texts))
	for i, t := range texts {
		out[i] = hash(t)
	}
	return out
}

// checkNote opens a signed note with the verifier and checks its body against origin/size/root.
func checkNote(verifiers note.Verifiers, text, origin string, size int64, root tlog.Hash) {
	n, err := note.Open([]byte(text), verifiers)
	if err != nil {
		fail("checkpoint signature: %v", err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 4 || lines[len(lines)-1] != "" {
		fail("checkpoint body is not origin, size, root hash: %q", n.Text)
	}
	if lines[0] != origin {
		fail("checkpoint origin %q, proof says %q", lines[0], origin)
	}
	got, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || got != size {
		fail("checkpoint size %q, proof says %d", lines[1], size)
	}
	if hash(lines[2]) != root {
		fail("checkpoint root differs from the proof's root")
	}
}

func check(vkey, path string) {
	var list []note.Verifier
	for _, text := range strings.Split(vkey, ",") {
		verifier, err := note.NewVerifier(text)
		if err != nil {
			fail("verifier key: %v", err)
		}
		list = append(list, verifier)
	}
	verifiers := note.VerifierList(list...)
	data, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	var doc document
	if err := json.Unmarshal(data, &doc); err != nil {
		fail("%v", err)
	}
	checked := 0
	if doc.TreeSize != nil {
		root := hash(doc.RootHash)
		checkNote(verifiers, doc.Checkpoint, doc.Origin, *doc.TreeSize, root)
		events := doc.Events
		if doc.Leaf != "" || doc.Proof != nil {
			events = append(events, doc.event)
		}
		if len(events) == 0 {
			fail("no event to check")
		}
		for _, e := range events {
			leaf, err := base64.StdEncoding.DecodeString(e.Leaf)
			if err != nil {
				fail("leaf is not base64")
			}
			proof := tlog.RecordProof(hashes(e.Proof))
			if err := tlog.CheckRecord(proof, *doc.TreeSize, root, e.LeafIndex, tlog.RecordHash(leaf)); err != nil {
				fail("inclusion of leaf %d in %d: %v", e.LeafIndex, *doc.TreeSize, err)
			}
			checked++
		}
	} else {
		oldRoot, newRoot := hash(doc.OldRoot), hash(doc.NewRoot)
		proof := tlog.TreeProof(hashes(doc.Consistency))
		if err := tlog.CheckTree(proof, doc.NewSize, newRoot, doc.OldSize, oldRoot); err != nil {
			fail("consistency %d -> %d: %v", doc.OldSize, doc.NewSize, err)
		}
		if doc.OldCheckpoint != nil {
			checkNote(verifiers, *doc.OldCheckpoint, doc.Origin, doc.OldSize, oldRoot)
		}
		if doc.NewCheckpoint != nil {
			checkNote(verifiers, *doc.NewCheckpoint, doc.Origin, doc.NewSize, newRoot)
		}
		checked++
	}
	fmt.Printf("ok %d\n", checked)
}

func roots(args []string) {
	var stored []tlog.Hash
	reader := tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		for i, x := range indexes {
			out[i] = stored[x]
		}
		return out, nil
	})
	for i, arg := range args {
		leaf, err := hex.DecodeString(arg)
		if err != nil {
			fail("not hex: %q", arg)
		}
		more, err := tlog.StoredHashes(int64(i), leaf, reader)
		if err != nil {
			fail("%v", err)
		}
		stored = append(stored, more...)
		root, err := tlog.TreeHash(int64(i+1), reader)
		if err != nil {
			fail("%v", err)
		}
		fmt.Println(hex.EncodeToString(root[:]))
	}
}

// proofs prints every inclusion proof and consistency proof of the tree of the leaves given, as
// Go's tlog makes them: "inclusion SIZE INDEX h1,h2,..." and "consistency NEW OLD h1,...".
func proofs(args []string) {
	var stored []tlog.Hash
	reader := tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		for i, x := range indexes {
			out[i] = stored[x]
		}
		return out, nil
	})
	join := func(hs []tlog.Hash) string {
		parts := make([]string, len(hs))
		for i, h := range hs {
			parts[i] = hex.EncodeToString(h[:])
		}
		return strings.Join(parts, ",")
	}
	for i, arg := range args {
		leaf, err := hex.DecodeString(arg)
		if err != nil {
			fail("not hex: %q", arg)
		}
		more, err := tlog.StoredHashes(int64(i), leaf, reader)
		if err != nil {
			fail("%v", err)
		}
		stored = append(stored, more...)
	}
	n := int64(len(args))
	for t := int64(1); t <= n; t++ {
		for i := int64(0); i < t; i++ {
			p, err := tlog.ProveRecord(t, i, reader)
			if err != nil {
				fail("%v", err)
			}
			fmt.Printf("inclusion %d %d %s\n", t, i, join(p))
		}
		for o := int64(1); o <= t; o++ {
			p, err := tlog.ProveTree(t, o, reader)
			if err != nil {
				fail("%v", err)
			}
			fmt.Printf("consistency %d %d %s\n", t, o, join(p))
		}
	}
}

// cosigned checks a cosignature/v1 line (c2sp.org/tlog-cosignature) written from the spec alone:
// key ID = SHA-256(name || "\n" || 0x04 || key)[:4]; signature = key ID || u64 time || Ed25519
// over "cosignature/v1\ntime <t>\n" || the note body.
func cosigned(vkey, wkey, path string) {
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		fail("verifier key: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	n, err := note.Open(data, note.VerifierList(verifier))
	if err != nil {
		fail("checkpoint signature: %v", err)
	}
	parts := strings.SplitN(wkey, "+", 3)
	if len(parts) != 3 {
		fail("witness key is not name+hash+key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 33 || raw[0] != 0x04 {
		fail("witness key is not an Ed25519 cosignature/v1 key (type 0x04)")
	}
	sum := sha256.Sum256(append([]byte(parts[0]+"\n"), raw...))
	if hex.EncodeToString(sum[:4]) != parts[1] {
		fail("witness key hash %s, computed %s", parts[1], hex.EncodeToString(sum[:4]))
	}
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Split(line, " ")
		if len(fields) != 3 || fields[0] != "\u2014" || fields[1] != parts[0] {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(fields[2])
		if err != nil || len(sig) != 4+8+64 || !bytes.Equal(sig[:4], sum[:4]) {
			continue
		}
		t := binary.BigEndian.Uint64(sig[4:12])
		msg := fmt.Sprintf("cosignature/v1\ntime %d\n%s", t, n.Text)
		if !ed25519.Verify(ed25519.PublicKey(raw[1:]), []byte(msg), sig[12:]) {
			fail("the cosignature does not verify")
		}
		lines := strings.Split(n.Text, "\n")
		fmt.Printf("ok %s %d\n", lines[1], t)
		found = true
	}
	if !found {
		fail("no cosignature line of %s", parts[0])
	}
}

func main() {
	switch {
	case len(os.Args) == 4 && os.Args[1] == "check":
		check(os.Args[2], os.Args[3])
	case len(os.Args) >= 2 && os.Args[1] == "roots":
		roots(os.Args[2:])
	case len(os.Args) >= 2 && os.Args[1] == "proofs":
		proofs(os.Args[2:])
	case len(os.Args) == 5 && os.Args[1] == "cosigned":
		cosigned(os.Args[2], os.Args[3], os.Args[4])
	default:
		fail("usage: tlog_oracle check VKEY FILE | roots HEX... | proofs HEX... | cosigned VKEY WKEY FILE")
	}
}
