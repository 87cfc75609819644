package nagare

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// Spill file layout: a sequence of records, each
//
//	'N' 'G' state(1) 0(1) len(u32 BE) crc32(u32 BE, of payload) payload
//	payload = taglen(u16 BE) tag count(u32 BE) entries
//
// state is 'P' (pending) or 'D' (delivered). A delivered record is marked in
// place; the file is truncated when no pending record is left. At open,
// pending records are queued again, in file order; a torn tail is cut off.
const (
	spillHeaderLen = 12
	statePending   = 'P'
	stateDone      = 'D'
)

var errSpillFull = errors.New("nagare: spill file size limit reached")

type spillFile struct {
	f     *os.File
	end   int64
	limit int64
}

type spilledChunk struct {
	off   int64
	tag   string
	count int
	size  int // bytes of entries
}

func openSpill(path string, limit int64) (*spillFile, []spilledChunk, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, err
	}
	s := &spillFile{f: f, limit: limit}
	chunks, end, err := s.scan()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if len(chunks) == 0 {
		end = 0
	}
	if err := f.Truncate(end); err != nil {
		f.Close()
		return nil, nil, err
	}
	s.end = end
	return s, chunks, nil
}

func (s *spillFile) scan() ([]spilledChunk, int64, error) {
	var out []spilledChunk
	var off int64
	var hdr [spillHeaderLen]byte
	for {
		if _, err := s.f.ReadAt(hdr[:], off); err != nil {
			if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
				return out, off, nil
			}
			return nil, 0, err
		}
		if hdr[0] != 'N' || hdr[1] != 'G' || (hdr[2] != statePending && hdr[2] != stateDone) {
			return out, off, nil
		}
		n := binary.BigEndian.Uint32(hdr[4:8])
		payload := make([]byte, n)
		if _, err := s.f.ReadAt(payload, off+spillHeaderLen); err != nil {
			return out, off, nil // torn tail
		}
		if crc32.ChecksumIEEE(payload) != binary.BigEndian.Uint32(hdr[8:12]) || n < 6 {
			return out, off, nil
		}
		tl := int(binary.BigEndian.Uint16(payload[:2]))
		if 2+tl+4 > len(payload) {
			return out, off, nil
		}
		if hdr[2] == statePending {
			out = append(out, spilledChunk{
				off:   off,
				tag:   string(payload[2 : 2+tl]),
				count: int(binary.BigEndian.Uint32(payload[2+tl:])),
				size:  len(payload) - 2 - tl - 4,
			})
		}
		off += spillHeaderLen + int64(n)
	}
}

// append writes one chunk and returns its offset.
func (s *spillFile) append(tag string, count int, entries []byte) (int64, error) {
	n := 2 + len(tag) + 4 + len(entries)
	if s.limit > 0 && s.end+int64(spillHeaderLen+n) > s.limit {
		return 0, errSpillFull
	}
	buf := make([]byte, spillHeaderLen, spillHeaderLen+n)
	buf[0], buf[1], buf[2] = 'N', 'G', statePending
	binary.BigEndian.PutUint32(buf[4:8], uint32(n))
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(tag)))
	buf = append(buf, tag...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(count))
	buf = append(buf, entries...)
	binary.BigEndian.PutUint32(buf[8:12], crc32.ChecksumIEEE(buf[spillHeaderLen:]))
	off := s.end
	if _, err := s.f.WriteAt(buf, off); err != nil {
		return 0, fmt.Errorf("nagare: spill write: %w", err)
	}
	s.end += int64(len(buf))
	return off, nil
}

// read returns the entries (size bytes) of the record of tag at off.
func (s *spillFile) read(tag string, off int64, size int) ([]byte, error) {
	start := off + spillHeaderLen + 2 + int64(len(tag)) + 4
	buf := make([]byte, size)
	if _, err := s.f.ReadAt(buf, start); err != nil {
		return nil, fmt.Errorf("nagare: spill read: %w", err)
	}
	return buf, nil
}

func (s *spillFile) markDone(off int64) error {
	_, err := s.f.WriteAt([]byte{stateDone}, off+2)
	return err
}

func (s *spillFile) reset() error {
	s.end = 0
	return s.f.Truncate(0)
}

func (s *spillFile) close() error {
	if err := s.f.Sync(); err != nil {
		s.f.Close()
		return err
	}
	return s.f.Close()
}
