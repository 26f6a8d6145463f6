#!/bin/bash
T=$1; B=${2:-20}
./fam.sh $T all 50000 12 $B; ./fam.sh $T all 50200 12 $B; ./fam.sh $T tight 50300 6 $B; echo done > /tmp/vdev/fam/$T-done-$B
