# 64-to-1 incast, 256 connections: goodput, queues, windows and bytes in flight, hints on and off
# Data: incast_256_timeline.dat, derived from runs/incast_256_hints_on.json, runs/incast_256_hints_off.json
set terminal svg size 1400,1500 dynamic noenhanced font 'Helvetica,12' background rgb 'white'
set output 'incast_256_timeline.svg'
set multiplot layout 4,2 columnsfirst title "64-to-1 incast, 256 connections: goodput, queues, windows and bytes in flight, hints on and off"
set grid
set key top right box opaque font ',10' samplen 2 spacing 0.9
set xrange [0:13.5654]
set xlabel "time (ms)"
set title "hints on: goodput into host 0"
set ylabel "goodput (Gb/s)"
unset logscale y
set yrange [0:300]
plot 'incast_256_timeline.dat' index 0 using 1:2 with lines lw 1.5 lc rgb '#1f77b4' title 'payload placed at host 0', 200 with lines dt 2 lc rgb 'black' title 'link (200 Gb/s)', 180 with lines dt 3 lc rgb 'gray40' title '0.9 x link'
set title "hints on: queue depth"
set ylabel "queue (KiB)"
set yrange [0:1638.4]
plot 'incast_256_timeline.dat' index 0 using 1:3 with lines lw 1.5 lc rgb '#d62728' title "host 0's downlinks (both planes)", '' index 0 using 1:4 with lines lc rgb '#ff9896' title 'deepest queue of the fabric', 1024 with lines dt 2 lc rgb 'black' title "host 0's two queues full (1024 KiB)", 512 with lines dt 4 lc rgb 'black' title 'one queue full (512 KiB)', 64 with lines dt 3 lc rgb 'gray40' title 'ECN threshold (64 KiB per queue)'
set title "hints on: window per connection (sum over its paths)"
set ylabel "window (KiB, log)"
set logscale y
set yrange [0.445312:31072.3]
plot 'incast_256_timeline.dat' index 0 using 1:5 with lines lw 1.5 lc rgb '#2ca02c' title 'cwnd (mean of 64 connections)', '' index 0 using 1:6 with lines lw 1.5 lc rgb '#9467bd' title 'window used: min(cwnd, hint)'
set title "hints on: bytes in flight toward host 0"
set ylabel "bytes (KiB, log)"
set yrange [62:1.6906e+06]
plot 'incast_256_timeline.dat' index 0 using 1:7 with lines lw 1.5 lc rgb '#8c564b' title 'in flight (every connection)', '' index 0 using 1:8 with lines lc rgb '#9467bd' title 'windows summed (256 x mean)', 1024 with lines dt 2 lc rgb 'black' title "host 0's queues (1024 KiB)", 228.265 with lines dt 3 lc rgb '#17becf' title 'receive budget = BDP (228 KiB)'
unset logscale y
set title "hints off: goodput into host 0"
set ylabel "goodput (Gb/s)"
unset logscale y
set yrange [0:300]
plot 'incast_256_timeline.dat' index 1 using 1:2 with lines lw 1.5 lc rgb '#1f77b4' title 'payload placed at host 0', 200 with lines dt 2 lc rgb 'black' title 'link (200 Gb/s)', 180 with lines dt 3 lc rgb 'gray40' title '0.9 x link'
set title "hints off: queue depth"
set ylabel "queue (KiB)"
set yrange [0:1638.4]
plot 'incast_256_timeline.dat' index 1 using 1:3 with lines lw 1.5 lc rgb '#d62728' title "host 0's downlinks (both planes)", '' index 1 using 1:4 with lines lc rgb '#ff9896' title 'deepest queue of the fabric', 1024 with lines dt 2 lc rgb 'black' title "host 0's two queues full (1024 KiB)", 512 with lines dt 4 lc rgb 'black' title 'one queue full (512 KiB)', 64 with lines dt 3 lc rgb 'gray40' title 'ECN threshold (64 KiB per queue)'
set title "hints off: window per connection (sum over its paths)"
set ylabel "window (KiB, log)"
set logscale y
set yrange [0.445312:31072.3]
plot 'incast_256_timeline.dat' index 1 using 1:5 with lines lw 1.5 lc rgb '#2ca02c' title 'cwnd (mean of 64 connections)', '' index 1 using 1:6 with lines lw 1.5 lc rgb '#9467bd' title 'window used: min(cwnd, hint)'
set title "hints off: bytes in flight toward host 0"
set ylabel "bytes (KiB, log)"
set yrange [62:1.6906e+06]
plot 'incast_256_timeline.dat' index 1 using 1:7 with lines lw 1.5 lc rgb '#8c564b' title 'in flight (every connection)', '' index 1 using 1:8 with lines lc rgb '#9467bd' title 'windows summed (256 x mean)', 1024 with lines dt 2 lc rgb 'black' title "host 0's queues (1024 KiB)", 228.265 with lines dt 3 lc rgb '#17becf' title 'receive budget = BDP (228 KiB)'
unset logscale y
unset multiplot
