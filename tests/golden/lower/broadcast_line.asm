; fusion/broadcast_line.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: fused_sub_mul_add_mul_sub_mul (class Flat)
; core function 0: units Kernel, tile 4096, buffers [b0,b1], workspace []
.kernel k_fused_sub_mul_add_mul_sub_mul aiv
.gm b0_1 f32 [] inout
.gm b1_2 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
    ldarg r0, 0
    ldarg r1, 1
    ldarg r5, 5
    ldarg r6, 6
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L6:
    bge r0, r1, L49
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 0
    add r3, r5, r0
    ld f32, 1x4096, 1, r2, @0x0, b0_1, r3, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vdup f32, 1x4096, 1, r2, @0x4000, 0.5
    vsub f32, 1x4096, 1, r2, @0x8000, @0x0, @0x4000
    vmul f32, 1x4096, 1, r2, @0x0, @0x8000, @0x4000
    vadd f32, 1x4096, 1, r2, @0x8000, @0x0, @0x4000
    vmul f32, 1x4096, 1, r2, @0x0, @0x8000, @0x4000
    vsub f32, 1x4096, 1, r2, @0x8000, @0x0, @0x4000
    vmul f32, 1x4096, 1, r2, @0x0, @0x8000, @0x4000
    setf v, mte3, 0
    waitf v, mte3, 0
    add r4, r6, r0
    st f32, 1x4096, 1, r2, b1_2, r4, 0, @0x0
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L49
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    add r3, r5, r0
    ld f32, 1x4096, 1, r2, @0xc0a0, b0_1, r3, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vdup f32, 1x4096, 1, r2, @0x100a0, 0.5
    vsub f32, 1x4096, 1, r2, @0x140a0, @0xc0a0, @0x100a0
    vmul f32, 1x4096, 1, r2, @0xc0a0, @0x140a0, @0x100a0
    vadd f32, 1x4096, 1, r2, @0x140a0, @0xc0a0, @0x100a0
    vmul f32, 1x4096, 1, r2, @0xc0a0, @0x140a0, @0x100a0
    vsub f32, 1x4096, 1, r2, @0x140a0, @0xc0a0, @0x100a0
    vmul f32, 1x4096, 1, r2, @0xc0a0, @0x140a0, @0x100a0
    setf v, mte3, 1
    waitf v, mte3, 1
    add r4, r6, r0
    st f32, 1x4096, 1, r2, b1_2, r4, 0, @0xc0a0
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L6
L49:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 1: add (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1,b2], workspace []
.kernel k_add aiv
.gm b0_0 f32 [] inout
.gm b1_2 f32 [] inout
.gm b2_3 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
.arg s5 0
.arg s6 0
.arg s7 0
.arg s8 0
.arg s9 0
.arg s10 0
.arg s11 0
.arg s12 0
.arg s13 0
.arg s14 0
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L87
    ldarg r2, 4
    max r27, r2, 1
    ldarg r5, 14
    ldarg r6, 15
    ldarg r7, 16
    mov r3, r0
    ldarg r31, 3
    max r31, r31, 1
    rem r4, r3, r31
    div r3, r3, r31
    ldarg r31, 6
    mul r31, r4, r31
    add r5, r5, r31
    ldarg r31, 9
    mul r31, r4, r31
    add r6, r6, r31
    ldarg r31, 12
    mul r31, r4, r31
    add r7, r7, r31
    ldarg r31, 5
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 11
    mul r31, r3, r31
    add r7, r7, r31
    waitf mte3, mte2, 0
    ld f32, 1x8176, 1, r2, @0x0, b0_0, r5, 0
    ld f32, 1x1, 1, 1, @0x17f60, b1_2, r6, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vbcast f32, 1x8176, 1, r2, @0x7fc0, @0x17f60
    vadd f32, 1x8176, 1, r27, @0xff80, @0x0, @0x7fc0
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x8176, 1, r2, b2_3, r7, 0, @0xff80
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L87
    ldarg r2, 4
    max r27, r2, 1
    ldarg r5, 14
    ldarg r6, 15
    ldarg r7, 16
    mov r3, r0
    ldarg r31, 3
    max r31, r31, 1
    rem r4, r3, r31
    div r3, r3, r31
    ldarg r31, 6
    mul r31, r4, r31
    add r5, r5, r31
    ldarg r31, 9
    mul r31, r4, r31
    add r6, r6, r31
    ldarg r31, 12
    mul r31, r4, r31
    add r7, r7, r31
    ldarg r31, 5
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 11
    mul r31, r3, r31
    add r7, r7, r31
    waitf mte3, mte2, 1
    ld f32, 1x8176, 1, r2, @0x18000, b0_0, r5, 0
    ld f32, 1x1, 1, 1, @0x2ff60, b1_2, r6, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vbcast f32, 1x8176, 1, r2, @0x1ffc0, @0x2ff60
    vadd f32, 1x8176, 1, r27, @0x27f80, @0x18000, @0x1ffc0
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x8176, 1, r2, b2_3, r7, 0, @0x27f80
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L87:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end
