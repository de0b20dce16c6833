# gpu-deps.sh - sourced by the GPU scripts: makes the libraries the GPU machine's
# image lacks (jansson, pcre2, utf8proc, cmocka, libyaml, the zstd tool) available from Debian .debs
# carried along with the tree, unpacked under /tmp/oscar-deps (no root install).
# Needs $here (the sourcing script's folder); OSCAR_DEBS overrides where the
# .debs are (default: ../../../debs from tests/gpu, i.e. .devcarry/debs).
if ! pkg-config --exists jansson libpcre2-8 libutf8proc yaml-0.1 2>/dev/null || ! command -v zstd > /dev/null; then
    debs=${OSCAR_DEBS:-$here/../../../debs}
    dst=/tmp/oscar-deps
    echo "gpu-deps: unpacking $(ls "$debs"/*.deb 2>/dev/null | wc -l) .debs from $debs into $dst"
    for d in "$debs"/*.deb; do dpkg -x "$d" "$dst" || exit 1; done
    for pc in $(find "$dst" -name '*.pc'); do
        sed -i "s|^prefix=.*|prefix=$dst/usr|" "$pc"
    done
    pcdirs=$(find "$dst" -type d -name pkgconfig | tr '\n' ':')
    libdirs=$(find "$dst" -type d \( -path '*/lib/x86_64-linux-gnu' -o -path '*/usr/lib' \) | tr '\n' ':')
    export PKG_CONFIG_PATH="${pcdirs}${PKG_CONFIG_PATH:-}"
    export LD_LIBRARY_PATH="${libdirs}${LD_LIBRARY_PATH:-}"
    export LIBRARY_PATH="${libdirs}${LIBRARY_PATH:-}"
    export CPATH="$dst/usr/include:${CPATH:-}"
    export PATH="$dst/usr/bin:$PATH"
fi

# Open MPI (openmpi-bin, libopenmpi3, libopenmpi-dev and their runtime libraries, Debian 12 .debs in
# OSCAR_MPI_DEBS, default .devcarry/mpi-debs) for the data-parallel GPU scripts, when the machine
# has no mpirun: unpacked under /tmp/oscar-mpi, OPAL_PREFIX tells Open MPI where it now lives.
if ! command -v mpirun > /dev/null; then
    mdebs=${OSCAR_MPI_DEBS:-$here/../../.devcarry/mpi-debs}
    mdst=/tmp/oscar-mpi
    if ls "$mdebs"/*.deb > /dev/null 2>&1; then
        echo "gpu-deps: unpacking $(ls "$mdebs"/*.deb | wc -l) Open MPI .debs from $mdebs into $mdst"
        for d in "$mdebs"/*.deb; do dpkg -x "$d" "$mdst" || exit 1; done
        for pc in $(find "$mdst" -name '*.pc'); do
            sed -i "s|^prefix=.*|prefix=$mdst/usr|" "$pc"
        done
        # Debian makes /usr/bin/mpirun an alternative at install time; dpkg -x leaves only mpirun.openmpi
        [ -e "$mdst/usr/bin/mpirun" ] || ln -sf mpirun.openmpi "$mdst/usr/bin/mpirun"
        export OPAL_PREFIX="$mdst/usr"
        export PKG_CONFIG_PATH="$mdst/usr/lib/x86_64-linux-gnu/pkgconfig:$mdst/usr/lib/x86_64-linux-gnu/openmpi/lib/pkgconfig:${PKG_CONFIG_PATH:-}"
        export LD_LIBRARY_PATH="$mdst/usr/lib/x86_64-linux-gnu:$mdst/usr/lib/x86_64-linux-gnu/openmpi/lib:${LD_LIBRARY_PATH:-}"
        export PATH="$mdst/usr/bin:$PATH"
    else
        echo "gpu-deps: no mpirun and no Open MPI .debs in $mdebs (apt-get download them: README)"
    fi
fi
