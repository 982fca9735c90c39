package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strings"
)

// plot draws the ready count over time of two phases as step lines, with
// axes, ticks and a legend, using only the standard library (a 5x7 bitmap
// font is built in).
func plot(w io.Writer, title string, a, b phase) error {
	const (
		width, height            = 960, 600
		left, right, top, bottom = 90, 30, 60, 130
	)
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	grey := color.RGBA{220, 220, 220, 255}
	black := color.RGBA{0, 0, 0, 255}
	colA := color.RGBA{31, 119, 180, 255}
	colB := color.RGBA{230, 110, 0, 255}

	xMax := math.Max(a.Seconds, b.Seconds)
	yMax := 0
	for _, p := range []phase{a, b} {
		for _, s := range p.Samples {
			yMax = max(yMax, s.Done)
		}
	}
	xStep, xTop := niceAxis(xMax)
	yStep, yTop := niceAxis(float64(yMax))
	pw, ph := width-left-right, height-top-bottom
	px := func(x float64) int { return left + int(math.Round(x/xTop*float64(pw))) }
	py := func(y float64) int { return top + ph - int(math.Round(y/yTop*float64(ph))) }

	for x := 0.0; x <= xTop+1e-9; x += xStep {
		line(img, px(x), top, px(x), top+ph, grey, 1)
		label := trimFloat(x)
		text(img, px(x)-textWidth(label, 2)/2, top+ph+10, label, black, 2)
	}
	for y := 0.0; y <= yTop+1e-9; y += yStep {
		line(img, left, py(y), left+pw, py(y), grey, 1)
		label := trimFloat(y)
		text(img, left-10-textWidth(label, 2), py(y)-7, label, black, 2)
	}
	line(img, left, top, left, top+ph, black, 2)
	line(img, left, top+ph, left+pw, top+ph, black, 2)
	text(img, left+pw/2-textWidth("seconds", 2)/2, top+ph+40, "seconds", black, 2)
	text(img, 10, top-30, "ready", black, 2)
	text(img, left+pw/2-textWidth(title, 3)/2, 12, title, black, 3)

	for _, s := range []struct {
		p phase
		c color.RGBA
	}{{a, colA}, {b, colB}} {
		prevX, prevY := px(0), py(0)
		for _, smp := range s.p.Samples {
			x, y := px(smp.T), py(float64(max(smp.Done, 0)))
			line(img, prevX, prevY, x, prevY, s.c, 3)
			line(img, x, prevY, x, y, s.c, 3)
			prevX, prevY = x, y
		}
	}

	// Legend, below the x axis, where it hides no curve.
	lx, ly := left, top+ph+72
	for i, l := range []struct {
		name string
		p    phase
		c    color.RGBA
	}{{"operator: " + a.Name, a, colA}, {"direct: " + b.Name, b, colB}} {
		y := ly + i*26
		line(img, lx, y+7, lx+40, y+7, l.c, 4)
		text(img, lx+52, y, fmt.Sprintf("%s, %s s", l.name, trimFloat(math.Round(l.p.Seconds*10)/10)), black, 2)
	}
	return png.Encode(w, img)
}

// niceAxis returns a tick step of 1, 2 or 5 times a power of ten giving
// about 5-10 ticks, and the top of the axis (a multiple of the step).
func niceAxis(v float64) (step, top float64) {
	if v <= 0 {
		return 1, 1
	}
	raw := v / 6
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * p; step >= raw {
			break
		}
	}
	top = math.Ceil(v/step) * step
	return step, top
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}

// line draws a line of the given thickness (Bresenham, square pen).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, thick int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		for i := range thick {
			for j := range thick {
				img.SetRGBA(x0+i-thick/2, y0+j-thick/2, c)
			}
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

func textWidth(s string, scale int) int { return len(s) * 6 * scale }

// text draws s with the built-in font; unknown characters are blank.
func text(img *image.RGBA, x, y int, s string, c color.RGBA, scale int) {
	for _, r := range strings.ToLower(s) {
		if g, ok := glyphs[r]; ok {
			for row, bits := range g {
				for col, bit := range bits {
					if bit != '#' {
						continue
					}
					for i := range scale {
						for j := range scale {
							img.SetRGBA(x+col*scale+i, y+row*scale+j, c)
						}
					}
				}
			}
		}
		x += 6 * scale
	}
}

// glyphs is a 5x7 bitmap font: digits, lower-case letters and a few signs.
var glyphs = map[rune][7]string{
	'0': {" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "},
	'1': {"  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
	'2': {" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"},
	'3': {"#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "},
	'4': {"   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "},
	'5': {"#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "},
	'6': {"  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "},
	'7': {"#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "},
	'8': {" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "},
	'9': {" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "},
	'a': {"     ", "     ", " ### ", "    #", " ####", "#   #", " ####"},
	'b': {"#    ", "#    ", "# ## ", "##  #", "#   #", "#   #", "#### "},
	'c': {"     ", "     ", " ### ", "#    ", "#    ", "#   #", " ### "},
	'd': {"    #", "    #", " ## #", "#  ##", "#   #", "#   #", " ####"},
	'e': {"     ", "     ", " ### ", "#   #", "#####", "#    ", " ### "},
	'f': {"  ## ", " #  #", " #   ", "###  ", " #   ", " #   ", " #   "},
	'g': {"     ", " ####", "#   #", "#   #", " ####", "    #", " ### "},
	'h': {"#    ", "#    ", "# ## ", "##  #", "#   #", "#   #", "#   #"},
	'i': {"  #  ", "     ", " ##  ", "  #  ", "  #  ", "  #  ", " ### "},
	'j': {"   # ", "     ", "  ## ", "   # ", "   # ", "#  # ", " ##  "},
	'k': {"#    ", "#    ", "#  # ", "# #  ", "##   ", "# #  ", "#  # "},
	'l': {" ##  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
	'm': {"     ", "     ", "## # ", "# # #", "# # #", "#   #", "#   #"},
	'n': {"     ", "     ", "# ## ", "##  #", "#   #", "#   #", "#   #"},
	'o': {"     ", "     ", " ### ", "#   #", "#   #", "#   #", " ### "},
	'p': {"     ", "     ", "#### ", "#   #", "#### ", "#    ", "#    "},
	'q': {"     ", "     ", " ## #", "#  ##", " ####", "    #", "    #"},
	'r': {"     ", "     ", "# ## ", "##  #", "#    ", "#    ", "#    "},
	's': {"     ", "     ", " ####", "#    ", " ### ", "    #", "#### "},
	't': {" #   ", " #   ", "###  ", " #   ", " #   ", " #  #", "  ## "},
	'u': {"     ", "     ", "#   #", "#   #", "#   #", "#  ##", " ## #"},
	'v': {"     ", "     ", "#   #", "#   #", "#   #", " # # ", "  #  "},
	'w': {"     ", "     ", "#   #", "#   #", "# # #", "# # #", " # # "},
	'x': {"     ", "     ", "#   #", " # # ", "  #  ", " # # ", "#   #"},
	'y': {"     ", "     ", "#   #", "#   #", " ####", "    #", " ### "},
	'z': {"     ", "     ", "#####", "   # ", "  #  ", " #   ", "#####"},
	'.': {"     ", "     ", "     ", "     ", "     ", " ##  ", " ##  "},
	',': {"     ", "     ", "     ", "     ", " ##  ", "  #  ", " #   "},
	':': {"     ", " ##  ", " ##  ", "     ", " ##  ", " ##  ", "     "},
	'/': {"     ", "    #", "   # ", "  #  ", " #   ", "#    ", "     "},
	'(': {"   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # "},
	')': {" #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   "},
	'-': {"     ", "     ", "     ", " ### ", "     ", "     ", "     "},
	'>': {" #   ", "  #  ", "   # ", "    #", "   # ", "  #  ", " #   "},
}
