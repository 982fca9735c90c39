package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotLine is one contender's ready count over a phase.
type plotLine struct {
	name  string
	p     phase
	color color.Color
}

// lineColors are the contenders' colours.
var lineColors = map[string]color.Color{
	contDirect:   color.RGBA{R: 230, G: 110, B: 0, A: 255},
	contOpkit:    color.RGBA{R: 31, G: 119, B: 180, A: 255},
	contTutorial: color.RGBA{R: 44, G: 160, B: 44, A: 255},
	contFloor:    color.RGBA{R: 128, G: 128, B: 128, A: 255},
	contWatched:  color.RGBA{R: 148, G: 103, B: 189, A: 255},
}

// plotReady draws the ready count over time of each line as a step line
// (gonum/plot) into a PNG at path.
func plotReady(path, title string, lines []plotLine) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "ready"
	p.X.Min, p.Y.Min = 0, 0
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = false, false
	for _, l := range lines {
		pts := plotter.XYs{{X: 0, Y: 0}}
		for _, s := range l.p.Samples {
			pts = append(pts, plotter.XY{X: s.T, Y: float64(max(s.Done, 0))})
		}
		pts = append(pts, plotter.XY{X: l.p.Seconds, Y: pts[len(pts)-1].Y})
		ln, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", l.name, err)
		}
		ln.StepStyle = plotter.PreStep
		ln.Color = l.color
		ln.Width = vg.Points(2)
		p.Add(ln)
		p.Legend.Add(fmt.Sprintf("%s: %.1f s", l.name, l.p.Seconds), ln)
	}
	p.Legend.ThumbnailWidth = vg.Points(30)
	p.Legend.Padding = vg.Points(4)
	p.Legend.YOffs = vg.Points(0)
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
