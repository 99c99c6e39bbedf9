package roster

// splitEnvelope finds the top-level "schema" and "payload" members of a
// JsonConverter envelope in one pass over b, without decoding them. With
// schemas.enable=true every record carries its table's whole schema
// (about 2 KB, four times the row): decoding it with encoding/json, only
// to find the schema cached already, was most of the decoder's time. ok is
// false when b is not a JSON object of string keys this scanner can
// follow; the caller then decodes b the ordinary way, which also reports
// what is wrong with it. The spans are validated where they are decoded.
func splitEnvelope(b []byte) (schema, payload []byte, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, nil, false
	}
	i++
	for {
		i = skipSpace(b, i)
		if i < len(b) && b[i] == '}' {
			return schema, payload, payload != nil && skipSpace(b, i+1) == len(b)
		}
		if i >= len(b) || b[i] != '"' {
			return nil, nil, false
		}
		end, ok := scanString(b, i)
		if !ok {
			return nil, nil, false
		}
		key := string(b[i+1 : end-1])
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, nil, false
		}
		i = skipSpace(b, i+1)
		vend, ok := scanValue(b, i)
		if !ok {
			return nil, nil, false
		}
		switch key {
		case "schema":
			schema = b[i:vend]
		case "payload":
			payload = b[i:vend]
		}
		i = skipSpace(b, vend)
		if i < len(b) && b[i] == ',' {
			i++
			continue
		}
		if i < len(b) && b[i] == '}' {
			return schema, payload, payload != nil && skipSpace(b, i+1) == len(b)
		}
		return nil, nil, false
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index after the string starting at b[i] == '"'.
func scanString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// scanValue returns the index after the value starting at b[i]: a string,
// or everything up to the bracket closing an object or array, or a
// literal up to the next delimiter.
func scanValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return scanString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := scanString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
		j++
	}
	return j, j > i
}
