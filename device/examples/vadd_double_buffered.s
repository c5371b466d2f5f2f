; z = x + y over n f32 elements on one AIV core, double buffered: while the
; vector unit adds one pair of tiles, MTE2 loads the next pair and MTE3
; stores the previous sum. Tiles are 1 x 4096 f32 (16 KiB); ping buffers at
; 0x0/0x4000/0x8000, pong buffers at 0xc000/0x10000/0x14000. The last tile
; may be partial: its valid width is min(4096, n - offset).
.kernel vadd_db aiv
.gm x f32 [100000] in
.gm y f32 [100000] in
.gm z f32 [100000] out
.arg n 100000
    ldarg r0, 0                 ; n
    movi r1, 0                  ; element offset
    setf mte3, mte2, 0          ; both buffer sets start free
    setf mte3, mte2, 1
loop:
    ; ---- ping ----
    sub r2, r0, r1
    min r2, r2, 4096            ; valid columns of this tile
    waitf mte3, mte2, 0         ; ping buffers stored: free to load
    ld f32, 1x4096, 1, r2, @0x0, x, r1, 0
    ld f32, 1x4096, 1, r2, @0x4000, y, r1, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vadd f32, 1x4096, 1, r2, @0x8000, @0x0, @0x4000
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x4096, 1, r2, z, r1, 0, @0x8000
    setf mte3, mte2, 0
    add r1, r1, 4096
    bge r1, r0, done
    ; ---- pong ----
    sub r2, r0, r1
    min r2, r2, 4096
    waitf mte3, mte2, 1
    ld f32, 1x4096, 1, r2, @0xc000, x, r1, 0
    ld f32, 1x4096, 1, r2, @0x10000, y, r1, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vadd f32, 1x4096, 1, r2, @0x14000, @0xc000, @0x10000
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x4096, 1, r2, z, r1, 0, @0x14000
    setf mte3, mte2, 1
    add r1, r1, 4096
    blt r1, r0, loop
done:
    waitf mte3, mte2, 0         ; drain: every flag raised is waited on
    waitf mte3, mte2, 1
    end
