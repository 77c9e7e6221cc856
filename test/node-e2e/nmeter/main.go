// Command nmeter is a stand-in for busybox's nmeter applet in the node conformance
// suite's busybox image (Debian's busybox, which the stand-in is made of, lacks it).
// The suite uses it for one thing: the time of day with milliseconds,
// `nmeter -d0 '%3t' | head -n1`. It understands -d<ms> (the delay between lines) and,
// in the format, %[n]t (the local time, hh:mm:ss with n decimals, n at most 6) and %%;
// everything else in the format is printed as it is. It prints a line after each delay
// until its output is closed.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	delay := time.Second
	format := ""
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-d" && i+1 < len(args):
			i++
			delay = parseDelay(args[i])
		case strings.HasPrefix(a, "-d"):
			delay = parseDelay(a[2:])
		default:
			format = a
		}
	}
	if format == "" {
		fmt.Fprintln(os.Stderr, "usage: nmeter [-d MSEC] FORMAT (stand-in: %[n]t only)")
		os.Exit(1)
	}
	for {
		if _, err := fmt.Println(render(format, time.Now())); err != nil {
			os.Exit(0) // the reader went away (head -n1)
		}
		time.Sleep(delay)
	}
}

func parseDelay(s string) time.Duration {
	ms, err := strconv.Atoi(s)
	if err != nil || ms < 0 {
		fmt.Fprintf(os.Stderr, "nmeter: bad delay %q\n", s)
		os.Exit(1)
	}
	return time.Duration(ms) * time.Millisecond
}

// render expands %[n]t and %% in format at time now.
func render(format string, now time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 >= len(format) {
			b.WriteByte(format[i])
			continue
		}
		j := i + 1
		digits := 0
		if format[j] >= '0' && format[j] <= '9' {
			digits = int(format[j] - '0')
			j++
		}
		switch {
		case j < len(format) && format[j] == 't':
			b.WriteString(now.Format("15:04:05"))
			if digits > 6 {
				digits = 6
			}
			if digits > 0 {
				frac := fmt.Sprintf("%06d", now.Nanosecond()/1000)
				b.WriteString("." + frac[:digits])
			}
			i = j
		case format[j] == '%':
			b.WriteByte('%')
			i = j
		default:
			b.WriteByte('%')
		}
	}
	return b.String()
}
