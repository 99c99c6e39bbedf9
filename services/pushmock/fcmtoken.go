package pushmock

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strconv"
)

// FCM registration tokens the mock recognises carry their device id and a
// tag of the project (sender) they were issued for, and look like real
// ones (about 160 characters, "<22 characters>:APA91b<…>"):
//
//	<8 hex: sender tag><14 hex: id>:APA91b<136 base64url characters derived from id>
//
// A token of another project answers 403 SENDER_ID_MISMATCH; anything else
// that is not such a token answers 400 INVALID_ARGUMENT, as FCM answers a
// malformed one.
const (
	fcmTokenHead   = 22
	fcmTokenMarker = ":APA91b"
	fcmTokenTail   = 136 // base64url of 102 derived bytes
	fcmTokenLen    = fcmTokenHead + len(fcmTokenMarker) + fcmTokenTail
)

// FCMToken returns the registration token of device id in [1, MaxID) for
// project: deterministic, so `notify seed` and the mock agree without
// sharing state.
func FCMToken(project string, id int64) string {
	b := make([]byte, 0, fcmTokenLen)
	b = fmt.Appendf(b, "%08x%014x", senderTag(project), id)
	b = append(b, fcmTokenMarker...)
	return string(appendTokenTail(b, id))
}

// FCMTokenID returns the id of a token FCMToken made, whether it was made
// for project, and false for anything else.
func FCMTokenID(token, project string) (id int64, sameProject, ok bool) {
	if len(token) != fcmTokenLen || token[fcmTokenHead:fcmTokenHead+len(fcmTokenMarker)] != fcmTokenMarker {
		return 0, false, false
	}
	tag, err := strconv.ParseUint(token[:8], 16, 32)
	if err != nil {
		return 0, false, false
	}
	id, err = strconv.ParseInt(token[8:fcmTokenHead], 16, 64)
	if err != nil || id < 1 || id >= MaxID {
		return 0, false, false
	}
	var tail [fcmTokenTail]byte
	if string(appendTokenTail(tail[:0], id)) != token[fcmTokenHead+len(fcmTokenMarker):] {
		return 0, false, false
	}
	return id, uint32(tag) == senderTag(project), true
}

func senderTag(project string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(project))
	return h.Sum32()
}

func appendTokenTail(b []byte, id int64) []byte {
	var raw [102]byte
	x := uint64(id) ^ 0x5851f42d4c957f2d
	for i := 0; i < len(raw); i += 8 {
		x = splitmix64(x)
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], x)
		copy(raw[i:], w[:])
	}
	return base64.RawURLEncoding.AppendEncode(b, raw[:])
}
