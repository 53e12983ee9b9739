"""``pitcrew demo``: a simulated GPU fleet with the real operator in the loop."""
