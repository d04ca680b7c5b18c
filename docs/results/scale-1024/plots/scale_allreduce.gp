# allreduce, 1024 hosts: step time p99 by scenario
# Data: scale_allreduce.dat, derived from runs/scale_allreduce_clean_metaroce.json, runs/scale_allreduce_clean_gbn_pfc.json, runs/scale_allreduce_clean_reorder.json, runs/scale_allreduce_spine_loss_1_metaroce.json, runs/scale_allreduce_spine_loss_1_gbn_pfc.json, runs/scale_allreduce_spine_loss_1_reorder.json, runs/scale_allreduce_spine_dead_metaroce.json, runs/scale_allreduce_spine_dead_gbn_pfc.json, runs/scale_allreduce_spine_dead_reorder.json, runs/scale_allreduce_spine_dead_reconverge_metaroce.json, runs/scale_allreduce_spine_dead_reconverge_gbn_pfc.json, runs/scale_allreduce_spine_dead_reconverge_reorder.json, runs/scale_allreduce_link_flap_metaroce.json, runs/scale_allreduce_link_flap_gbn_pfc.json, runs/scale_allreduce_link_flap_reorder.json, runs/scale_allreduce_incast_beside_metaroce.json, runs/scale_allreduce_incast_beside_gbn_pfc.json, runs/scale_allreduce_incast_beside_reorder.json
set terminal svg size 960,640 dynamic noenhanced font 'Helvetica,13' background rgb 'white'
set output 'scale_allreduce.svg'
set title "allreduce, 1024 hosts: step time p99 by scenario"
set xlabel "scenario"
set ylabel "step time p99 (us)"
set grid
set key below
set style data histograms
set style fill solid 0.8
set xtics rotate by -30
set logscale y
set yrange [1:*]
plot 'scale_allreduce.dat' using 2:xtic(1) title 'MetaRoCE, lossy', 'scale_allreduce.dat' using 3:xtic(1) title 'go-back-N, lossless (PFC)', 'scale_allreduce.dat' using 4:xtic(1) title 'reorder buffer 64 KiB, lossy'
