; Row softmax of one tile: y[r, :] = exp(x[r, :] - max(x[r, :])) / sum(...)
; for `rows` rows of `cols` f32 values (at most 16 x 1024). X at 0x0 and the
; broadcast tile T at 0x10000 are 16 x 1024 f32 (64 KiB each); the per-row
; vector R sits at 0x20000.
.kernel softmax_rows aiv
.gm x f32 [16,1000] in
.gm y f32 [16,1000] out
.arg rows 16
.arg cols 1000
    ldarg r0, 0                                 ; rows
    ldarg r1, 1                                 ; cols (also the GM row stride)
    ld f32, 16x1024, r0, r1, @0x0, x, 0, r1
    setf mte2, v, 0
    waitf mte2, v, 0
    vrmax f32, 16x1024, r0, r1, @0x20000, @0x0   ; R = row max
    vbrow f32, 16x1024, r0, r1, @0x10000, @0x20000
    vsub f32, 16x1024, r0, r1, @0x0, @0x0, @0x10000
    vunary f32, 16x1024, r0, r1, @0x0, @0x0, exp
    vrsum f32, 16x1024, r0, r1, @0x20000, @0x0   ; R = row sum
    vbrow f32, 16x1024, r0, r1, @0x10000, @0x20000
    vdiv f32, 16x1024, r0, r1, @0x0, @0x0, @0x10000
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 16x1024, r0, r1, y, 0, r1, @0x0
    end
